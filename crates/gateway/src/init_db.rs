//! `openshell gateway init-db`: the database set-up for a server the gateway does not run.
//!
//! Given a superuser's URL it migrates the database (which makes the three roles) and sets
//! the gateway's and operator's passwords from files (made, mode 0600, with a random
//! password when absent); without one it prints the SQL a database administrator runs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use openshell_store::{GATEWAY_ROLE, OPERATOR_ROLE, Store};

#[derive(Debug, Clone, clap::Args)]
pub struct InitDbOptions {
    /// A superuser's URL: migrate and set the roles' passwords. Without it (and without
    /// --database-url-file), the set-up SQL is printed instead.
    #[arg(long, env = "OPENSHELL_DATABASE_URL", hide_env_values = true, conflicts_with = "database_url_file")]
    pub database_url: Option<String>,
    /// A file holding the superuser's URL (keeps its password off the command line).
    #[arg(long)]
    pub database_url_file: Option<PathBuf>,
    /// The openshell_gateway role's password file (made with a random password if absent).
    #[arg(long, default_value = "gateway-password")]
    pub gateway_password_file: PathBuf,
    /// The openshell_operator role's password file (made with a random password if absent).
    #[arg(long, default_value = "operator-password")]
    pub operator_password_file: PathBuf,
}

/// The SQL a database administrator runs when the gateway may not (no superuser URL).
pub const ROLE_SQL: &str =
    "-- As a superuser, in the gateway's database. The migrations (run by `openshell gateway init-db
-- --database-url-file FILE` with a superuser URL, or by a gateway started once with --allow-superuser)
-- make the roles and grant each exactly what it needs; they only need passwords:
CREATE ROLE openshell_owner NOLOGIN;
CREATE ROLE openshell_gateway LOGIN PASSWORD 'choose one';
CREATE ROLE openshell_operator LOGIN PASSWORD 'choose another';
-- then start the gateway with the openshell_gateway role's URL in a 0600 file:
--   openshell gateway start --database-url-file /etc/openshell/database-url
";

/// Runs the set-up (with a URL) and returns what to tell the user.
pub async fn run(opts: &InitDbOptions) -> anyhow::Result<String> {
    let url = match (&opts.database_url, &opts.database_url_file) {
        (Some(u), _) => u.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?.trim().into()
        }
        (None, None) => return Ok(ROLE_SQL.to_string()),
    };
    let store = Store::connect(&url, 1)?;
    anyhow::ensure!(
        store.login_is_superuser().await?,
        "init-db needs a superuser's URL (it makes roles and migrates); {} is not one",
        crate::startup::redact(&url)
    );
    store.migrate().await.context("applying migrations")?;
    let gateway = password(&opts.gateway_password_file)?;
    let operator = password(&opts.operator_password_file)?;
    store.set_role_passwords(&gateway, &operator).await?;
    let config: tokio_postgres::Config = url.parse()?;
    let hosts = crate::startup::redact(&url);
    let rest = hosts.split_once('@').map_or("", |(_, r)| r);
    Ok(format!(
        "database migrated; roles ready.\n  gateway:  postgres://{GATEWAY_ROLE}@{rest} (password in {})\n  \
         operator: postgres://{OPERATOR_ROLE}@{rest} (password in {})\n\
         put the gateway's URL with its password in a 0600 file and start it with --database-url-file{}",
        opts.gateway_password_file.display(),
        opts.operator_password_file.display(),
        if config.get_dbname().is_none() { " (and name the database in it)" } else { "" }
    ))
}

/// A password from a file, or a new random one written there (mode 0600).
fn password(path: &Path) -> anyhow::Result<String> {
    if let Ok(p) = std::fs::read_to_string(path)
        && !p.trim().is_empty()
    {
        return Ok(p.trim().to_string());
    }
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let p = crate::tokens::mint("").map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(p.as_bytes())?;
    Ok(p)
}

/// `openshell gateway admin-token`: the gateway's own OS user, on its host, mints a new token
/// for the admin through the embedded cluster's socket in the state directory (never the
/// network) and writes it to the CLI config (0600); the mint is audited.
pub async fn admin_token(state_dir: &Path, postgres_dir: Option<&Path>) -> anyhow::Result<String> {
    let state_dir =
        std::fs::canonicalize(state_dir).with_context(|| format!("state directory {}", state_dir.display()))?;
    let cluster = crate::startup::postgres_dir(postgres_dir, &state_dir);
    let url = openshell_embedded_postgres::local_gateway_url(&state_dir.join("postgres"), &cluster)?;
    let store = Store::connect(&url, 1)?;
    let token = crate::tokens::mint(crate::tokens::USER_PREFIX).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let user = store.admin_token_mint(&crate::tokens::hash(&token), "gateway admin-token").await?;
    store.close();
    let endpoint = crate::client_config::load().ok().flatten().map(|c| c.endpoint);
    let path = crate::client_config::save(&crate::client_config::ClientConfig {
        endpoint: endpoint.unwrap_or_else(|| "http://127.0.0.1:7570".into()),
        user: user.clone(),
        token,
    })?;
    Ok(format!("a new token for {user} is in {} (mode 0600)", path.display()))
}
