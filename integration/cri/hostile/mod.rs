//! The standing hostile-input suite (issue 16): `cri::hostile::` trials.

mod cases;
mod suite;

/// Every trial of the modules above.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    suite::trials()
}
