//! Generic clients work without our protos: Python grpcio discovers every service through
//! server reflection and calls them with and without a credential.

use openshell_e2e::*;

#[tokio::test]
async fn python_grpcio_uses_reflection_to_call_the_gateway() {
    let h = Harness::fake().await;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join(".deps/py/bin/python");
    assert!(python.is_file(), "{} missing: run scripts/setup.sh", python.display());
    let out = tokio::process::Command::new(python)
        .arg(repo.join("tests/interop/grpc_reflection_client.py"))
        .arg(h.endpoint.trim_start_matches("http://"))
        .arg(&h.admin_token)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let services: Vec<&str> = v["services"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    for s in [
        "openshell.v1.Sandboxes",
        "openshell.v1.Grants",
        "openshell.v1.Audit",
        "openshell.v1.Users",
        "openshell.v1.Health",
    ] {
        assert!(services.contains(&s), "{s} in {services:?}");
    }
    assert_eq!(v["status"]["ok"]["database_ok"], true, "{v}");
    assert_eq!(v["whoami"]["ok"]["name"], "admin", "{v}");
    assert_eq!(v["whoami_anonymous"]["error"], "UNAUTHENTICATED", "{v}");
}
