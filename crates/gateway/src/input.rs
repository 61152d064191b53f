//! Checks on request fields that the database does not see (sizes, shapes), each naming
//! its field.

use chrono::{DateTime, Utc};
use openshell_store::Error;

pub const MAX_ARGS: usize = 256;
pub const MAX_ARG_BYTES: usize = 4096;
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;

pub fn command(field: &str, command: &[String]) -> Result<(), Error> {
    if command.is_empty() {
        return Err(Error::invalid(field, "a command is required (e.g. `-- sleep 600`)"));
    }
    if command[0].is_empty() {
        return Err(Error::invalid(field, "the program name is empty"));
    }
    if command.len() > MAX_ARGS {
        return Err(Error::invalid(field, format!("at most {MAX_ARGS} arguments, got {}", command.len())));
    }
    if let Some(i) = command.iter().position(|a| a.len() > MAX_ARG_BYTES) {
        return Err(Error::invalid(field, format!("argument {i} is longer than {MAX_ARG_BYTES} bytes")));
    }
    if command.iter().map(String::len).sum::<usize>() > MAX_COMMAND_BYTES {
        return Err(Error::invalid(field, format!("longer than {MAX_COMMAND_BYTES} bytes in all")));
    }
    if command.iter().any(|a| a.contains('\0')) {
        return Err(Error::invalid(field, "arguments cannot contain NUL bytes"));
    }
    Ok(())
}

/// `expires`: an RFC 3339 instant, or a duration from now such as `4h` or `30m`.
pub fn expires(field: &str, value: &str) -> Result<DateTime<Utc>, Error> {
    let value = value.trim();
    if value.is_empty() {
        return Err(Error::invalid(field, "required: a duration such as 4h, or an RFC 3339 time"));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(value) {
        return Ok(t.with_timezone(&Utc));
    }
    let d = humantime::parse_duration(value).map_err(|e| {
        Error::invalid(field, format!("`{value}` is neither a duration (4h, 30m) nor an RFC 3339 time: {e}"))
    })?;
    let d = chrono::Duration::from_std(d).map_err(|_| Error::invalid(field, "duration too large"))?;
    Utc::now().checked_add_signed(d).ok_or_else(|| Error::invalid(field, "duration too large"))
}

/// A sandbox or user reference: bounded before it reaches SQL.
pub fn reference(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(field, "a sandbox name or id is required"));
    }
    if value.len() > 128 {
        return Err(Error::invalid(field, "longer than 128 bytes: not a sandbox name or id"));
    }
    Ok(())
}

/// A tool child's idle period in seconds: 1 second to 7 days.
pub fn tool_idle(field: &str, seconds: u32) -> Result<i32, Error> {
    match seconds {
        1..=604_800 => Ok(seconds as i32),
        _ => Err(Error::invalid(field, format!("must be between 1 second and 7 days (604800 s), got {seconds}"))),
    }
}

pub fn page_size(value: i32) -> Result<i64, Error> {
    match value {
        0 => Ok(100),
        1..=1000 => Ok(value as i64),
        _ => Err(Error::invalid("page_size", format!("must be between 1 and 1000, got {value}"))),
    }
}

pub fn optional_time(field: &str, value: &str) -> Result<Option<DateTime<Utc>>, Error> {
    if value.is_empty() {
        return Ok(None);
    }
    DateTime::parse_from_rfc3339(value)
        .map(|t| Some(t.with_timezone(&Utc)))
        .map_err(|e| Error::invalid(field, format!("not an RFC 3339 time: {e}")))
}
