//! `openshell-gateway`: runs the gateway in the foreground (same as `openshell gateway start`).

use clap::Parser;

#[derive(Parser)]
#[command(name = "openshell-gateway", version, about = "The OpenShell delegation gateway")]
struct Cli {
    #[command(flatten)]
    options: openshell_gateway::startup::Options,
}

fn main() -> anyhow::Result<()> {
    // Before anything else (threads, tokens, the database password): nothing of this
    // process can be read through /proc or ptrace by another process of its user.
    openshell_gateway::startup::not_dumpable()?;
    tokio::runtime::Runtime::new()?.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let signals = openshell_gateway::startup::StopSignals::install()?;
    openshell_gateway::logging::init(cli.options.log_format);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for warning in openshell_gateway::argv::secret_warnings(&args) {
        tracing::warn!("{warning}");
    }
    let running = openshell_gateway::startup::start(&cli.options).await?;
    println!("gateway listening on {}", running.endpoint);
    running.serve_until_stopped(signals).await
}
