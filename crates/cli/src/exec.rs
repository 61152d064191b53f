//! `openshell sandbox exec`: runs a command in a sandbox, streaming stdin in and stdout and
//! stderr out, and exits with the command's exit code.

use std::io::{IsTerminal, Write};

use openshell_proto::v1 as pb;
use pb::exec_input::Input;
use pb::exec_output::Output;
use tokio::io::AsyncReadExt;

use crate::client::{Client, Failure};

pub struct ExecArgs {
    pub sandbox: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub timeout: u32,
    pub output_cap: u64,
    pub no_stdin: bool,
}

/// Runs the command; returns its exit code (0-255) for the CLI to exit with.
pub async fn run(c: &Client, a: ExecArgs) -> Result<u8, Failure> {
    // A terminal's stdin would wait for typing; a pipe or file is forwarded.
    let stdin = !a.no_stdin && !std::io::stdin().is_terminal();
    let start = pb::ExecStart {
        sandbox: a.sandbox,
        command: a.command,
        env: a.env.into_iter().collect(),
        workdir: a.workdir.unwrap_or_default(),
        timeout_seconds: a.timeout,
        output_cap: a.output_cap,
        stdin,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let _ = tx.send(pb::ExecInput { input: Some(Input::Start(start)) }).await;
    if stdin {
        tokio::spawn(async move {
            let mut input = tokio::io::stdin();
            let mut buf = vec![0u8; 32 * 1024];
            while let Ok(n) = input.read(&mut buf).await {
                let msg = if n == 0 { Input::StdinEof(true) } else { Input::Stdin(buf[..n].to_vec()) };
                if tx.send(pb::ExecInput { input: Some(msg) }).await.is_err() || n == 0 {
                    break;
                }
            }
        });
    } else {
        // Keep the request stream open until the answer is complete.
        tokio::spawn(async move { tx.closed().await });
    }
    let request = c.request(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut out = c.sandboxes().exec_sandbox(request).await.map_err(Failure::from)?.into_inner();
    while let Some(msg) = out.message().await.map_err(Failure::from)? {
        match msg.output {
            Some(Output::Stdout(d)) => {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(&d);
                let _ = o.flush();
            }
            Some(Output::Stderr(d)) => {
                let mut e = std::io::stderr().lock();
                let _ = e.write_all(&d);
                let _ = e.flush();
            }
            Some(Output::Exit(x)) => {
                if !x.error.is_empty() {
                    return Err(Failure::local(127, format!("the command did not start: {}", x.error)));
                }
                if x.timed_out {
                    eprintln!("openshell: the command ran past its timeout and was killed");
                }
                if x.output_capped {
                    eprintln!("openshell: the command's output reached its cap and the command was killed");
                }
                return Ok(x.code.clamp(0, 255) as u8);
            }
            None => {}
        }
    }
    Err(Failure::local(8, "the gateway ended the exec without an exit status"))
}
