//! The feature proposal's own command, exactly as it is written, on the container driver
//! (podman) with the `pi-agent:local` image (docker/pi-agent/): the lead runs Pi with
//! pi-mcp-adapter, and Pi, driven with a scripted model, creates a worker through the door
//! and runs a command in it. The grant names /usr/local/bin/node, a path of the image (the
//! host has none there).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::inside::run_in_with;
use openshell_e2e::*;
use openshell_proto::v1 as pb;

fn repo() -> PathBuf {
    std::fs::canonicalize(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

const PROPOSAL: &str = "openshell sandbox create --name lead --from pi-agent:local --policy lead.yaml \
    --grant-max-depth 1 --grant-max-breadth 2 --grant-max-total 3 --grant-expires 4h \
    --grant-program /usr/local/bin/node -- pi";

/// Runs a shell `command` in `sandbox` with `stdin`; (exit code, stdout, stderr).
async fn exec_with(api: &Api, sandbox: &str, command: &str, stdin: &[u8]) -> (i32, String, String) {
    run_in_with(api, sandbox, vec!["/bin/sh".into(), "-c".into(), command.into()], Some(stdin)).await
}

#[tokio::test]
async fn the_proposal_command_runs_pi_as_a_lead_that_delegates_through_the_door() {
    let h = Harness::on(Backend::Container, |_| {}).await;
    let a = h.admin().await;
    let dir = TempDir::new("openshell-pi-agent");
    std::fs::write(
        dir.0.join("lead.yaml"),
        "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]\n  \
         read_write: [/tmp, /dev/null]\nlandlock: { compatibility: best_effort }\n",
    )
    .unwrap();
    let out = tokio::process::Command::new("sh")
        .args(["-c", PROPOSAL])
        .current_dir(&dir.0)
        .env("PATH", format!("{}:{}", bin("openshell").parent().unwrap().display(), std::env::var("PATH").unwrap()))
        .env("OPENSHELL_ENDPOINT", &h.endpoint)
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &dir.0)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{PROPOSAL}\n{stdout}\n{stderr}");
    assert!(stdout.contains("READY"), "{stdout}");
    // `pi` as the main command has no prompt: it stays up, waiting for one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(a.get("lead").await.unwrap().phase, "READY", "pi waits rather than exits");

    // The scripted model (an OpenAI-compatible server on the lead's own loopback) and Pi's
    // provider for it, handed in through exec's stdin; then Pi, asked to delegate.
    let model = std::fs::read(repo().join("tests/interop/scripted_model.mjs")).unwrap();
    let (code, _, err) = exec_with(&a, "lead", "cat > /tmp/scripted_model.mjs", &model).await;
    assert_eq!(code, 0, "{err}");
    let script = std::fs::read(repo().join("examples/pi/script.json")).unwrap();
    let (code, _, err) = exec_with(&a, "lead", "cat > /tmp/script.json", &script).await;
    assert_eq!(code, 0, "{err}");
    let models = std::fs::read(repo().join("examples/pi/models.json")).unwrap();
    let (code, _, err) = exec_with(&a, "lead", "mkdir -p ~/.pi/agent && cat > ~/.pi/agent/models.json", &models).await;
    assert_eq!(code, 0, "{err}");
    let run = "node /tmp/scripted_model.mjs 18080 /tmp/script.json > /tmp/model.out 2>&1 & \
               for i in $(seq 100); do grep -q listening /tmp/model.out 2>/dev/null && break; sleep 0.1; done; \
               pi --no-session --model scripted/scripted -p 'Create a tool child named worker with the \
               openshell_create_sandbox tool, then run echo hello from worker in it with openshell_exec. Both \
               are reached through the mcp tool.'";
    let (code, out, err) = exec_with(&a, "lead", run, b"").await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("hello from worker"), "{out}\n{err}");

    let worker = a.get("worker").await.unwrap();
    assert_eq!(worker.parent_name, "lead");
    assert!(worker.created_by.contains("program:/usr/local/bin/node"), "{}", worker.created_by);
    let g = a.grants().get_grant(a.req(pb::GetGrantRequest { sandbox: "lead".into() })).await.unwrap().into_inner();
    assert_eq!((g.max_depth, g.max_breadth, g.max_total), (1, 2, 3), "the grant is the command's");
    assert_eq!(g.program, "/usr/local/bin/node");
}
