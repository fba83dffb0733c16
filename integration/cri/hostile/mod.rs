//! The standing hostile-input suite (issue 16): `cri::hostile::` trials.

mod cases;
mod suite;

trials! {
    suite,
}
