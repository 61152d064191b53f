//! The gateway's own log on stderr: text for people, with colour only on a terminal (a file
//! or a journal gets no ANSI codes), or one JSON object a line for log shippers
//! (`--log-format json`). `RUST_LOG` filters both (default `info`).

use std::io::IsTerminal;

/// How the log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people; coloured only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, message and fields.
    Json,
}

/// Installs the process's log subscriber (once, at start).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => log.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => log.json().flatten_event(true).init(),
    }
}
