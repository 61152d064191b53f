//! Principals and users (sql/auth.sql, sql/users.sql): who a token belongs to, the first
//! admin, the admin's token minted on the gateway's host, and the users an admin adds.

use crate::row::RowExt;
use crate::{Error, Principal, Store, queries};

impl Store {
    /// The principal behind a token's SHA-256, if it is a user's live token or a live
    /// sandbox's credential.
    pub async fn authenticate(&self, token_hash: &[u8; 32]) -> Result<Option<Principal>, Error> {
        let rows = self.call(&queries::AUTHENTICATE, &[&token_hash.as_slice()]).await?;
        let Some(r) = rows.first() else { return Ok(None) };
        Ok(Some(if r.col::<_, &str>("kind")? == "user" {
            Principal::User { id: r.col("user_id")?, name: r.col("user_name")?, admin: r.col("is_admin")? }
        } else {
            Principal::Sandbox {
                id: r.col("sandbox_id")?,
                name: r.col("sandbox_name")?,
                owner: r.col("user_id")?,
                program: None,
            }
        }))
    }

    /// Creates the first admin when there are no users yet; false if users exist.
    pub async fn bootstrap_admin(&self, name: &str, token_hash: &[u8; 32]) -> Result<bool, Error> {
        self.value(&queries::BOOTSTRAP_ADMIN, &[&name, &token_hash.as_slice()]).await
    }

    /// A new token (its hash) for the first admin, audited as a system action; returns the
    /// admin's name. Only `openshell gateway admin-token` on the gateway's host calls it.
    pub async fn admin_token_mint(&self, token_hash: &[u8; 32], label: &str) -> Result<String, Error> {
        self.value(&queries::ADMIN_TOKEN_MINT, &[&token_hash.as_slice(), &label]).await
    }

    /// An admin adds a user with one token (stored hashed); `user_create` decides who may.
    pub async fn create_user(
        &self,
        actor: &Principal,
        name: &str,
        admin: bool,
        token_hash: &[u8; 32],
    ) -> Result<(), Error> {
        self.call(&queries::USER_CREATE, &[actor, &name, &admin, &token_hash.as_slice()]).await?;
        Ok(())
    }
}
