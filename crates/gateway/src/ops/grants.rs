//! The user's grant over a tree: create, read, list, change, revoke. Only users touch grants
//! (the SQL functions decide whose tree); every refused change leaves a receipt.

use openshell_store::{Error, Grant, GrantChange, GrantValues, Principal};

use crate::{Gateway, input, program};

/// A grant as the user wrote it (limits, then expiry, program, rate, idle period as text).
#[derive(Default)]
pub struct GrantSpec {
    pub max_depth: i32,
    pub max_breadth: i32,
    pub max_total: i32,
    pub expires: String,
    pub program: String,
    pub rate: String,
    /// 0 for the default idle period.
    pub tool_idle_seconds: u32,
}

impl GrantSpec {
    /// The checked values (the program resolved as the kernel reports it; `in_image`: a path
    /// of the sandboxes' images, see `program::resolve`), each refusal naming its `grant.`
    /// field.
    pub fn values(&self, in_image: bool) -> Result<GrantValues, Error> {
        let (program, program_resolved) = program::resolve("grant.program", &self.program, in_image)?;
        Ok(GrantValues {
            max_depth: self.max_depth,
            max_breadth: self.max_breadth,
            max_total: self.max_total,
            expires_at: input::expires("grant.expires", &self.expires)?,
            program,
            program_resolved,
            rate: program::rate("grant.rate", &self.rate)?,
            tool_idle_seconds: match self.tool_idle_seconds {
                0 => None,
                s => Some(input::tool_idle("grant.tool_idle_seconds", s)?),
            },
        })
    }
}

/// A change to a grant: each field set is changed, the rest kept.
#[derive(Default)]
pub struct GrantEdit {
    pub max_depth: Option<i32>,
    pub max_breadth: Option<i32>,
    pub max_total: Option<i32>,
    pub expires: Option<String>,
    pub program: Option<String>,
    pub rate: Option<String>,
    pub tool_idle_seconds: Option<i32>,
}

impl GrantEdit {
    fn change(&self, in_image: bool) -> Result<GrantChange, Error> {
        let change = GrantChange {
            max_depth: self.max_depth,
            max_breadth: self.max_breadth,
            max_total: self.max_total,
            expires_at: self.expires.as_deref().map(|e| input::expires("expires", e)).transpose()?,
            program: self.program.as_deref().map(|p| program::resolve("program", p, in_image)).transpose()?,
            rate: self.rate.as_deref().map(|v| program::rate("rate", v)).transpose()?,
            tool_idle_seconds: self
                .tool_idle_seconds
                .map(|s| u32::try_from(s).map_err(|_| Error::invalid("tool_idle_seconds", "must be positive")))
                .transpose()?
                .map(|s| input::tool_idle("tool_idle_seconds", s))
                .transpose()?,
        };
        if change == GrantChange::default() {
            return Err(Error::invalid(
                "grant",
                "nothing to change: set at least one of max_depth, max_breadth, max_total, expires, program, \
                 tool_idle_seconds, rate",
            ));
        }
        Ok(change)
    }
}

impl Gateway {
    pub async fn create_grant(
        &self,
        caller: &Principal,
        sandbox: &str,
        spec: Option<GrantSpec>,
    ) -> Result<Grant, Error> {
        let result = async {
            input::reference("sandbox", sandbox)?;
            let spec = spec.ok_or_else(|| Error::invalid("grant", "required"))?;
            self.store.create_grant(caller, sandbox, &spec.values(self.driver.needs_image())?).await
        }
        .await;
        self.receipt_on_refusal(caller, "grant.create", sandbox, None, result).await
    }

    pub async fn get_grant(&self, caller: &Principal, sandbox: &str) -> Result<Grant, Error> {
        input::reference("sandbox", sandbox)?;
        self.store.grant(caller, sandbox).await
    }

    /// The caller's grants, or the one over `root`'s tree.
    pub async fn list_grants(&self, caller: &Principal, root: Option<&str>) -> Result<Vec<Grant>, Error> {
        if let Some(root) = root {
            input::reference("sandbox", root)?;
        }
        self.store.list_grants(caller, root).await
    }

    pub async fn update_grant(&self, caller: &Principal, sandbox: &str, edit: GrantEdit) -> Result<Grant, Error> {
        let result = async {
            input::reference("sandbox", sandbox)?;
            self.store.update_grant(caller, sandbox, &edit.change(self.driver.needs_image())?).await
        }
        .await;
        self.receipt_on_refusal(caller, "grant.update", sandbox, None, result).await
    }

    pub async fn revoke_grant(&self, caller: &Principal, sandbox: &str) -> Result<Grant, Error> {
        let result = async {
            input::reference("sandbox", sandbox)?;
            self.store.revoke_grant(caller, sandbox).await
        }
        .await;
        self.receipt_on_refusal(caller, "grant.revoke", sandbox, None, result).await
    }
}
