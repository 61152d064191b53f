//! The grant's program as the kernel will report it: what the user wrote, resolved on the
//! gateway's host (`/usr/bin/python3` -> `/usr/bin/python3.11`), since the door names the
//! executable the kernel shows, with every symlink followed. A driver that runs sandboxes
//! from images (containers) runs programs of the image, not of the host: there the path is
//! taken as written, and must name the image's file itself, not a link to it.

use openshell_store::{Error, Rate};

/// `program` checked and resolved: (as written, resolved). It must be an absolute path to
/// an existing regular file of the host, or, `in_image`, of the sandboxes' images (which the
/// gateway cannot read: resolved is then as written).
pub fn resolve(field: &str, program: &str, in_image: bool) -> Result<(String, String), Error> {
    if !program.starts_with('/') || program.len() > 4096 || program.contains('\0') {
        return Err(Error::invalid(field, "must be an absolute path of at most 4096 bytes"));
    }
    if in_image {
        return Ok((program.to_string(), program.to_string()));
    }
    let resolved = std::fs::canonicalize(program)
        .map_err(|e| Error::invalid(field, format!("{program} cannot be resolved on the gateway's host: {e}")))?;
    if !resolved.is_file() {
        return Err(Error::invalid(
            field,
            format!("{program} resolves to {}, which is not a file", resolved.display()),
        ));
    }
    let resolved = resolved
        .into_os_string()
        .into_string()
        .map_err(|_| Error::invalid(field, format!("{program} resolves to a path that is not UTF-8")))?;
    Ok((program.to_string(), resolved))
}

/// A grant's tool-call rate: empty is the default (10/s).
pub fn rate(field: &str, value: &str) -> Result<Rate, Error> {
    if value.trim().is_empty() {
        return Ok(Rate::default());
    }
    value.parse().map_err(|e: String| Error::invalid(field, e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn follows_symlinks_and_names_the_field() {
        let dir = std::env::temp_dir().join(format!("program-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("real");
        std::fs::write(&target, "").unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let (written, resolved) = super::resolve("grant.program", link.to_str().unwrap(), false).unwrap();
        assert_eq!(written, link.to_str().unwrap());
        assert_eq!(resolved, target.to_str().unwrap());
        let e = super::resolve("grant.program", dir.join("missing").to_str().unwrap(), false).unwrap_err();
        assert_eq!(e.details["field"], "grant.program");
        assert!(super::resolve("grant.program", dir.to_str().unwrap(), false).is_err(), "a directory is not a program");
        assert!(super::resolve("grant.program", "python3", false).is_err(), "relative");
        // The images' programs: taken as written, whatever the host has there.
        let in_image = super::resolve("grant.program", "/usr/local/bin/not-on-this-host", true).unwrap();
        assert_eq!(in_image.1, "/usr/local/bin/not-on-this-host");
        assert!(super::resolve("grant.program", "node", true).is_err(), "relative");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rates() {
        assert_eq!(super::rate("rate", "").unwrap().to_string(), "10/s");
        assert_eq!(super::rate("rate", "600/min").unwrap().to_string(), "600/min");
        assert_eq!(super::rate("rate", "5/s").unwrap().calls, 5);
        for bad in ["0/s", "5", "5/h", "x/s", "100001/s"] {
            assert_eq!(super::rate("rate", bad).unwrap_err().details["field"], "rate", "{bad}");
        }
    }
}
