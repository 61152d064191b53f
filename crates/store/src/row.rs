//! Reading rows without panicking: every column is read with `try_get`, and a column that is
//! missing or of another type than the Rust side expects is the store's [`Error`] naming it
//! (a schema this build does not match), never a panic in the middle of a call.

use std::fmt::Display;

use tokio_postgres::Row;
use tokio_postgres::row::RowIndex;
use tokio_postgres::types::FromSql;

use crate::{Code, Error};

pub(crate) trait RowExt {
    /// The column `idx` (a name or a position) as a `T`.
    fn col<'a, I, T>(&'a self, idx: I) -> Result<T, Error>
    where
        I: RowIndex + Display + Copy,
        T: FromSql<'a>;
}

impl RowExt for Row {
    fn col<'a, I, T>(&'a self, idx: I) -> Result<T, Error>
    where
        I: RowIndex + Display + Copy,
        T: FromSql<'a>,
    {
        self.try_get(idx).map_err(|e| decode_error(idx, std::any::type_name::<T>(), e))
    }
}

fn decode_error(column: impl Display, rust: &str, e: tokio_postgres::Error) -> Error {
    tracing::error!(%column, rust, error = %e, "a row the store cannot decode");
    Error::new(Code::Unavailable, format!("database error: column {column} cannot be read as {rust}: {e}"))
        .with_details(serde_json::json!({ "column": column.to_string() }))
}

/// The first row of a call's result, or `what` is missing.
pub(crate) fn first<'r>(rows: &'r [Row], what: &str) -> Result<&'r Row, Error> {
    rows.first().ok_or_else(|| Error::database(format!("{what} returned no row")))
}

/// Decodes rows into a value.
pub(crate) trait FromRow: Sized {
    fn from_row(r: &Row) -> Result<Self, Error>;
}

/// Every row of a result, decoded; the first that cannot be is the error.
pub(crate) fn all<T: FromRow>(rows: &[Row]) -> Result<Vec<T>, Error> {
    rows.iter().map(T::from_row).collect()
}
