//! The database roles as the gateway's host sets them up (sql/roles.sql says what each may
//! call): whether the login is a superuser, and the roles' passwords for `gateway init-db`.

use crate::row::RowExt;
use crate::{Error, GATEWAY_ROLE, OPERATOR_ROLE, Store, queries};

impl Store {
    /// Whether the URL's login is a superuser (the gateway refuses one unless allowed).
    pub async fn login_is_superuser(&self) -> Result<bool, Error> {
        let (client, conn) = self.config.connect(tokio_postgres::NoTls).await?;
        let conn = tokio::spawn(conn);
        let row = client.query_one(queries::LOGIN_IS_SUPERUSER.sql, &[]).await;
        drop(client);
        let _ = conn.await;
        row?.col(0)
    }

    /// Sets the gateway and operator roles' passwords (as a superuser: `gateway init-db`).
    pub async fn set_role_passwords(&self, gateway: &str, operator: &str) -> Result<(), Error> {
        let (client, conn) = self.config.connect(tokio_postgres::NoTls).await?;
        let conn = tokio::spawn(conn);
        // ALTER ROLE takes no parameters: the statement quotes the literals in SQL itself.
        let result =
            client.query_one(queries::ROLE_PASSWORDS.sql, &[&GATEWAY_ROLE, &gateway, &OPERATOR_ROLE, &operator]).await;
        let result = match result {
            Ok(row) => match row.col::<_, &str>(0) {
                Ok(alter) => client.batch_execute(alter).await.map_err(Error::from),
                Err(e) => Err(e),
            },
            Err(e) => Err(e.into()),
        };
        drop(client);
        let _ = conn.await;
        result
    }
}
