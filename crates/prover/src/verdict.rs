//! What a check answers, in a shape the gateway can put into error details.

use openshell_policy::Access;
use serde::{Deserialize, Serialize};

/// The prover's answer. Only [`Verdict::Within`] admits a candidate.
// One verdict per check: its size does not matter, plain matching does.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "details", rename_all = "snake_case")]
pub enum Verdict {
    /// Everything the candidate allows, the boundary allows.
    Within,
    /// The candidate allows something the boundary does not; replayed through the matcher.
    Exceeds(Counterexample),
    /// The candidate has a shape the prover cannot model (or is over its size limits).
    Unsupported(String),
    /// No answer in time or within the solver's resources; retrying may help.
    Inconclusive(String),
}

impl Verdict {
    pub fn is_within(&self) -> bool {
        matches!(self, Verdict::Within)
    }
}

/// The policy section a counterexample comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    Network,
    Filesystem,
    Process,
    Landlock,
}

/// A concrete access the candidate allows and the boundary does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counterexample {
    /// One line for people: `program /usr/bin/curl -> api.github.com:443 POST /repos/x/issues`,
    /// `write /etc/passwd`.
    pub access: String,
    /// Which candidate rule admits it and what the nearest boundary rule lacks.
    pub hint: String,
    pub section: Section,
    /// The same access, structured; `Policy::allows` on it is true for the candidate and
    /// false for the boundary.
    pub request: Access,
    /// The candidate's `network_policies` key that admits a network counterexample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_rule: Option<String>,
    /// The boundary's `network_policies` key the hint compares against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boundary_rule: Option<String>,
}
