//! Conformance defects critest and a real kubelet found (issue 12): `cri::conform::` trials.

mod deadline;
mod defects;

/// Every trial of the modules above.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    let mut all = Vec::new();
    all.extend(defects::trials());
    all.extend(deadline::trials());
    all
}
