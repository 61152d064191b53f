//! The project's error-code vocabulary, once on the Rust side: each
//! code's name on every surface and the SQLSTATE a refusal raised in SQL carries, the mirror
//! of the `os_error_codes` table that `os_refuse` raises from (sql/refuse.sql; a store test
//! checks the two agree).

use serde::Serialize;

/// The error codes every surface uses; `os_error_codes` holds the same list with each meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    NotAllowed,
    LimitReached,
    PolicyExceedsParent,
    PolicyUnprovable,
    InvalidArgument,
    NotFound,
    Conflict,
    Unauthenticated,
    /// The database could not be reached or kept failing: retry later. Not a refusal.
    Unavailable,
}

impl Code {
    /// Every code, in the order of the `os_error_codes` rows (sql/refuse.sql).
    pub const ALL: [Code; 9] = [
        Code::NotAllowed,
        Code::LimitReached,
        Code::PolicyExceedsParent,
        Code::PolicyUnprovable,
        Code::InvalidArgument,
        Code::NotFound,
        Code::Conflict,
        Code::Unauthenticated,
        Code::Unavailable,
    ];

    pub const fn as_str(self) -> &'static str {
        self.names().0
    }

    /// The SQLSTATE a refusal with this code raised in SQL carries (`os_error_codes`).
    pub const fn sqlstate(self) -> &'static str {
        self.names().1
    }

    /// The one list on this side of the boundary: the code's name and its SQLSTATE.
    const fn names(self) -> (&'static str, &'static str) {
        match self {
            Code::NotAllowed => ("NOT_ALLOWED", "OS001"),
            Code::LimitReached => ("LIMIT_REACHED", "OS002"),
            Code::PolicyExceedsParent => ("POLICY_EXCEEDS_PARENT", "OS003"),
            Code::PolicyUnprovable => ("POLICY_UNPROVABLE", "OS004"),
            Code::InvalidArgument => ("INVALID_ARGUMENT", "OS005"),
            Code::NotFound => ("NOT_FOUND", "OS006"),
            Code::Conflict => ("CONFLICT", "OS007"),
            Code::Unauthenticated => ("UNAUTHENTICATED", "OS008"),
            Code::Unavailable => ("UNAVAILABLE", "OS010"),
        }
    }

    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The code a project SQLSTATE stands for (None: not one of ours).
    pub fn from_sqlstate(state: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.sqlstate() == state)
    }

    /// Whether the caller was refused (and a receipt is due), as opposed to a fault.
    pub fn is_refusal(self) -> bool {
        !matches!(self, Code::Unavailable)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sqlstates_are_distinct_and_round_trip() {
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(c));
            assert_eq!(Code::from_sqlstate(c.sqlstate()), Some(c));
        }
        let mut states: Vec<_> = Code::ALL.iter().map(|c| c.sqlstate()).collect();
        states.sort();
        states.dedup();
        assert_eq!(states.len(), Code::ALL.len());
        assert_eq!(Code::parse("MAYBE"), None);
        assert_eq!(Code::from_sqlstate("23505"), None);
    }
}
