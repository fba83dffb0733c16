//! Conformance defects critest and a real kubelet found (issue 12): `cri::conform::` trials.

mod deadline;
mod defects;

trials! {
    defects,
    deadline,
}
