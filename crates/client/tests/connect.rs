//! Endpoints are checked before anything is dialled, and a token never shows in what the
//! client prints or returns.

use openshell_client::{Code, ConnectError, Endpoint};

#[test]
fn bad_endpoints_are_refused_naming_why() {
    for (url, why) in [
        ("127.0.0.1:7570", "http://"),
        ("https://127.0.0.1:7570", "https"),
        ("unix:///run/x.sock", "http://"),
        ("http://", "URL"),
        ("http://[::1", "URL"),
        ("not a url", "http://"),
        ("http://a b", "URL"),
    ] {
        let e = Endpoint::parse(url).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{url}");
        let text = e.to_string();
        assert!(text.starts_with(&format!("endpoint {url}:")), "{text}");
        assert!(text.contains(why), "{url}: {text}");
    }
    assert_eq!(Endpoint::parse("http://127.0.0.1:7570").unwrap().url(), "http://127.0.0.1:7570");
}

#[tokio::test]
async fn a_token_never_shows() {
    let secret = "osk_secret_0123456789abcdef";
    let c = Endpoint::parse("http://127.0.0.1:9").unwrap().connect_lazy(Some(secret)).unwrap();
    assert!(!format!("{c:?}").contains(secret));
    let req = c.request(());
    assert!(!format!("{req:?}").contains(secret), "{req:?}");
    assert_eq!(req.metadata().get("authorization").unwrap().to_str().unwrap(), format!("Bearer {secret}"));

    // A token that cannot be a header is refused without echoing it.
    let bad = format!("{secret}\n");
    let e = Endpoint::parse("http://127.0.0.1:9").unwrap().connect_lazy(Some(&bad)).unwrap_err();
    assert!(matches!(e, ConnectError::Token));
    assert!(!e.to_string().contains(secret) && !format!("{e:?}").contains(secret));

    // Nothing listening: unreachable, and the error names the endpoint, not the token.
    let e = Endpoint::parse("http://127.0.0.1:9").unwrap().connect(Some(secret)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(!e.to_string().contains(secret) && !format!("{e:?}").contains(secret));
}

#[tokio::test]
async fn a_door_client_carries_its_program_and_a_plain_one_none() {
    let c = Endpoint::parse("http://127.0.0.1:9").unwrap().connect_lazy(Some("t")).unwrap();
    assert!(c.request(()).metadata().get(openshell_client::PROGRAM_HEADER).is_none());
    let door = c.with_token(Some("d"), Some("/usr/bin/python3")).unwrap();
    let r = door.request(());
    assert_eq!(r.metadata().get(openshell_client::PROGRAM_HEADER).unwrap(), "/usr/bin/python3");
    assert_eq!(r.metadata().get("authorization").unwrap(), "Bearer d");
    assert!(matches!(c.with_token(Some("d"), Some("/bin/\nx")), Err(ConnectError::Program)));
}
