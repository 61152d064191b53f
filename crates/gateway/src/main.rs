//! `openshell-gateway`: runs the gateway in the foreground (same as `openshell gateway start`).

use clap::Parser;

#[derive(Parser)]
#[command(name = "openshell-gateway", version, about = "The OpenShell delegation gateway")]
struct Cli {
    #[command(flatten)]
    options: openshell_gateway::server::Options,
}

fn main() -> anyhow::Result<()> {
    // Before anything else (threads, tokens, the database password): nothing of this
    // process can be read through /proc or ptrace by another process of its user.
    openshell_gateway::server::not_dumpable()?;
    tokio::runtime::Runtime::new()?.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    for warning in openshell_gateway::argv::secret_warnings(&args) {
        tracing::warn!("{warning}");
    }
    let cli = Cli::parse();
    let running = openshell_gateway::server::start(&cli.options).await?;
    println!("gateway listening on {}", running.endpoint);
    openshell_gateway::server::wait_for_signal().await;
    running.shutdown().await
}
