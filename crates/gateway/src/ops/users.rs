//! Users (an admin adds them) and the gateway's status as a caller may see it.

use openshell_store::{Error, Principal};

use crate::{Gateway, tokens};

/// The gateway's status; `database` is empty for a caller who is not signed in, `disk` is
/// for users only.
pub struct Status {
    pub driver: String,
    pub database: String,
    pub database_ok: bool,
    pub disk: Option<(openshell_driver::DiskBackend, openshell_driver::DiskUsage)>,
}

impl Gateway {
    /// Adds a user and returns their login token (shown once, stored only as its hash).
    pub async fn create_user(&self, caller: &Principal, name: &str, admin: bool) -> Result<String, Error> {
        // Only an admin adds users: user_create decides (sql/users.sql), nothing here.
        let token = tokens::mint(tokens::USER_PREFIX).map_err(Error::unavailable)?;
        self.store.create_user(caller, name, admin, &tokens::hash(&token)).await?;
        Ok(token)
    }

    /// Liveness for anyone; where the database is, only for a signed-in caller; what the
    /// sandboxes' disks take on this host, only for a user.
    pub async fn status(&self, caller: Option<&Principal>) -> Status {
        let user = matches!(caller, Some(Principal::User { .. }));
        let driver = self.driver.clone();
        let disk =
            if user { tokio::task::spawn_blocking(move || driver.disk_usage()).await.ok().flatten() } else { None };
        Status {
            driver: self.driver.name().into(),
            database: if caller.is_some() { self.settings.database_public_url.clone() } else { String::new() },
            database_ok: self.store.ping().await,
            disk,
        }
    }
}
