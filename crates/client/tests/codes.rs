//! The client reads every code the gateway can send exactly as the gateway meant it: the
//! real gateway's status mapping (`openshell_gateway::to_status`) round-trips through
//! [`Refusal`], and the vocabulary is the store's, variant for variant.

use openshell_client::{Code, Refusal};
use openshell_store::{Code as StoreCode, Error};

/// Every store code, by an exhaustive match (a new variant fails to compile here).
fn store_codes() -> Vec<StoreCode> {
    let all = [
        StoreCode::NotAllowed,
        StoreCode::LimitReached,
        StoreCode::PolicyExceedsParent,
        StoreCode::PolicyUnprovable,
        StoreCode::InvalidArgument,
        StoreCode::NotFound,
        StoreCode::Conflict,
        StoreCode::Unauthenticated,
        StoreCode::Unavailable,
    ];
    for c in all {
        match c {
            StoreCode::NotAllowed
            | StoreCode::LimitReached
            | StoreCode::PolicyExceedsParent
            | StoreCode::PolicyUnprovable
            | StoreCode::InvalidArgument
            | StoreCode::NotFound
            | StoreCode::Conflict
            | StoreCode::Unauthenticated
            | StoreCode::Unavailable => {}
        }
    }
    all.to_vec()
}

#[test]
fn the_vocabulary_is_the_stores() {
    let store: Vec<&str> = store_codes().into_iter().map(StoreCode::as_str).collect();
    let client: Vec<&str> = Code::ALL.into_iter().map(Code::as_str).collect();
    assert_eq!(store, client);
    for c in Code::ALL {
        assert_eq!(Code::parse(c.as_str()), Some(c));
    }
}

#[test]
fn every_gateway_refusal_reads_back_with_its_code_message_details_and_exit() {
    let exits = [4, 5, 6, 6, 2, 3, 7, 4, 8];
    for (c, exit) in store_codes().into_iter().zip(exits) {
        let e = Error::new(c, "what happened").with_details(serde_json::json!({"limit": "depth", "max": 2}));
        let status = openshell_gateway::to_status(e);
        let r = Refusal::from(&status);
        assert_eq!(r.code.map(Code::as_str), Some(c.as_str()));
        assert!(r.from_gateway);
        assert_eq!(r.message, "what happened");
        assert_eq!(r.details.get("limit").map(String::as_str), Some("depth"));
        assert_eq!(r.details.get("max").map(String::as_str), Some("2"));
        assert_eq!(r.exit_code(), exit, "{c:?}");
        assert_eq!(r.to_string(), format!("{}: what happened", c.as_str()));
    }
}

#[test]
fn statuses_without_error_info_map_only_where_unambiguous() {
    let r = Refusal::from(tonic::Status::unavailable("connection refused"));
    assert_eq!((r.code, r.from_gateway, r.exit_code()), (Some(Code::Unavailable), false, 8));
    let r = Refusal::from(tonic::Status::deadline_exceeded("slow"));
    assert_eq!(r.code, Some(Code::Unavailable));
    // FAILED_PRECONDITION is two of our codes: without ErrorInfo it is neither.
    let r = Refusal::from(tonic::Status::failed_precondition("?"));
    assert_eq!((r.code, r.exit_code(), r.code_name().as_str()), (None, 1, "FailedPrecondition"));
    let r = Refusal::from(tonic::Status::unimplemented("no such method"));
    assert_eq!((r.code, r.exit_code()), (None, 1));
}

#[test]
fn the_program_header_is_the_one_the_gateway_reads() {
    assert_eq!(openshell_client::PROGRAM_HEADER, openshell_gateway::PROGRAM_HEADER);
}
