//! How much of the disk sandboxes use, how much more the running ones may still write, and
//! whether a new sandbox fits before the reserve that stays free for everyone else.
//!
//! A running sandbox's image is sparse: it takes host space as its agent writes, up to its
//! size. So the space a new sandbox may count on is the free space less what the running
//! ones may still write (their sizes less what they hold), and a sandbox is admitted only if,
//! that and its own size taken, the reserve is still free: running sandboxes together can
//! never eat into it (with `overcommit` above 1, only that share of what they may still write
//! is counted).

use serde::Serialize;

/// What the sandboxes of one gateway hold on the filesystem of their images, now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// The folder holding the images (the filesystem whose space is counted).
    pub path: String,
    /// That filesystem's size and what unprivileged writers may still take of it.
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// Host space the images take now (their written blocks).
    pub used_bytes: u64,
    /// What the running sandboxes may still write: their sizes less what they hold.
    pub owed_bytes: u64,
    /// Sandboxes whose filesystem may still grow, and stopped ones whose files are kept.
    pub running: u32,
    pub kept: u32,
    /// Free space no sandbox is admitted into.
    pub reserve_bytes: u64,
    /// The share of `owed_bytes` counted against the free space is `1 / overcommit`.
    pub overcommit: f64,
}

impl Usage {
    /// Free space a new sandbox may still count on: the free space less the counted share of
    /// what running sandboxes may still write, less the reserve.
    pub fn room(&self) -> i128 {
        self.free_bytes as i128 - (self.owed_bytes as f64 / self.overcommit) as i128 - self.reserve_bytes as i128
    }

    /// Whether a new sandbox of `bytes` fits (`None`: its size is not known yet; then only
    /// whether the reserve is already reached).
    pub fn fits(&self, bytes: Option<u64>) -> bool {
        match bytes {
            Some(b) => self.room() >= (b as f64 / self.overcommit) as i128,
            None => self.room() > 0,
        }
    }
}

/// A size as people write it: bytes (`1048576`), or with a binary unit K, M, G or T
/// (`512M`, `2G`; `KiB`, `MB` and the like read the same).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size (e.g. 512M)"))?;
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s:?} is too large"))
}

/// Bytes as people read them (binary units, one decimal).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(free: u64, owed: u64, reserve: u64, overcommit: f64) -> Usage {
        Usage { free_bytes: free, owed_bytes: owed, reserve_bytes: reserve, overcommit, ..Default::default() }
    }

    #[test]
    fn a_sandbox_fits_only_beside_what_running_ones_may_still_write_and_the_reserve() {
        const G: u64 = 1 << 30;
        // 10 GiB free, 4 GiB still owed to running sandboxes, 2 GiB reserve: 4 GiB of room.
        let u = usage(10 * G, 4 * G, 2 * G, 1.0);
        assert_eq!(u.room(), (4 * G) as i128);
        assert!(u.fits(Some(4 * G)));
        assert!(!u.fits(Some(4 * G + 1)));
        assert!(u.fits(None));
        // Overcommitted 4 times: a quarter of what is owed and of the new size counts.
        let u = usage(10 * G, 16 * G, 2 * G, 4.0);
        assert_eq!(u.room(), (4 * G) as i128);
        assert!(u.fits(Some(16 * G)) && !u.fits(Some(17 * G)));
        // At the reserve nothing is admitted, whatever its size.
        let u = usage(2 * G, 0, 2 * G, 1.0);
        assert!(!u.fits(None) && !u.fits(Some(16 << 20)));
        // Below it, neither.
        let u = usage(G, 0, 2 * G, 100.0);
        assert!(!u.fits(None) && !u.fits(Some(1)));
    }

    #[test]
    fn sizes_parse_as_people_write_them() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert!(parse_size("2X").unwrap_err().contains("unknown unit"));
        assert!(parse_size("-1").is_err() && parse_size("").is_err() && parse_size("1.5G").is_err());
        assert!(parse_size("99999999999T").unwrap_err().contains("too large"));
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(2 << 30), "2.0 GiB");
        assert_eq!(human(1536 << 10), "1.5 MiB");
    }
}
