//! Each sandbox's own filesystem, so the kernel bounds what it writes and it goes away with it.
//!
//! A sandbox's disk is a sparse ext4 image of its template's `disk_bytes`, copied from a
//! formatted template ([`template`]), attached to a loop device and mounted at the sandbox's
//! folder ([`mount`]): its working directory and its /tmp live there, so a write past the size
//! fails with ENOSPC inside and takes no more host space than the size. The images live in one
//! folder of the gateway's state directory (0700):
//!
//! ```text
//! STATE/disks/ID.img          a live sandbox's image (mounted at SANDBOX_ROOT/ID while it runs)
//! STATE/disks/ID.kept.img     a stopped sandbox's, kept until its files are removed
//! STATE/disks/prepared-N.img  one made ahead of its sandbox ([`Prepared`]), renamed ID.img when taken
//! STATE/disks/templates/      ext4-BYTES.img, one formatted image per size
//! STATE/disks/lock            taken while a new image is admitted and made
//! ```
//!
//! Admission ([`space`]) counts what running sandboxes may still write, so together they never
//! take the reserve kept free for the gateway and its database. Without root (no loop
//! devices, no mounts) the disk is a tmpfs of the same size in the sandbox's own mount
//! namespace instead ([`Backend::Memory`], mounted by the sandbox's init), charged to its
//! memory.

mod loopdev;
pub mod mount;
pub mod space;
mod template;
pub mod tree;

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use uuid::Uuid;

pub use space::{Usage, human, parse_size};

/// Smallest disk a sandbox may have (ext4 and the layout need a little).
pub const MIN_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DiskError(pub String);

/// Where a sandbox's files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An ext4 image on a loop device, mounted by the gateway (root).
    Image,
    /// A tmpfs of the same size mounted by the sandbox's init, charged to its memory; its
    /// files go when it stops (a gateway that is not root).
    Memory,
    /// No filesystem of its own: the working directory sits on the host's disk, unbounded.
    /// Only for benchmarks that measure what the disk costs.
    Unbounded,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Image => "image",
            Backend::Memory => "memory",
            Backend::Unbounded => "unbounded",
        }
    }
}

/// How one gateway gives sandboxes their disks.
#[derive(Debug, Clone)]
pub struct Settings {
    pub backend: Backend,
    /// Largest disk a sandbox may have.
    pub max_bytes: u64,
    /// Free space on the images' filesystem that no sandbox is admitted into.
    pub reserve_bytes: u64,
    /// How many times the free space the sizes of running sandboxes may add up to (1: each
    /// can always write its whole size).
    pub overcommit: f64,
}

/// The default largest disk (`--max-disk`).
pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;
/// The default free space kept from sandboxes (`--disk-reserve`).
pub const DEFAULT_RESERVE_BYTES: u64 = 2 << 30;

impl Default for Settings {
    /// Images as root. A gateway that is not root gets no disk of its own by default yet:
    /// its suites do not pass on the tmpfs backend (`--disk-backend memory` opts in).
    fn default() -> Settings {
        Settings {
            backend: if nix::unistd::geteuid().is_root() { Backend::Image } else { Backend::Unbounded },
            max_bytes: DEFAULT_MAX_BYTES,
            reserve_bytes: DEFAULT_RESERVE_BYTES,
            overcommit: 1.0,
        }
    }
}

/// No room for a new sandbox: what the disk holds, and what was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Shortage {
    pub message: String,
    pub usage: Usage,
    pub requested_bytes: Option<u64>,
}

impl Shortage {
    /// For an error's details (no path beyond the images' folder, no secret).
    pub fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": "disk",
            "path": self.usage.path,
            "free_bytes": self.usage.free_bytes,
            "owed_bytes": self.usage.owed_bytes,
            "reserve_bytes": self.usage.reserve_bytes,
            "requested_bytes": self.requested_bytes,
        })
    }
}

/// How the images and folders of prepared disks are named.
const PREPARED: &str = "prepared-";

/// A disk made ahead of its sandbox ([`Disks::prepare`]): mounted nowhere until
/// [`Disks::take`]; dropped untaken, it is unmounted and its image removed.
pub struct Prepared {
    image: PathBuf,
    tree: Option<std::os::fd::OwnedFd>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if self.tree.take().is_some() {
            let _ = std::fs::remove_file(&self.image);
        }
    }
}

/// The disks of one gateway's sandboxes.
pub struct Disks {
    dir: PathBuf,
    settings: Settings,
    mkfs: Option<PathBuf>,
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> DiskError {
    DiskError(format!("{what}: {e}"))
}

fn private_dir(path: &Path) -> Result<(), DiskError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.is_dir() => return Err(DiskError(format!("{} is not a folder", path.display()))),
        Ok(_) => {}
        Err(_) => std::fs::create_dir(path).map_err(|e| err(path.display(), e))?,
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(|e| err(path.display(), e))
}

impl Disks {
    /// The disks kept in `dir` (made here, 0700, inside the gateway's state directory).
    pub fn new(dir: &Path, settings: Settings) -> Result<Disks, DiskError> {
        private_dir(dir)?;
        private_dir(&dir.join("templates"))?;
        let mkfs = match settings.backend {
            Backend::Image if !nix::unistd::geteuid().is_root() => {
                return Err(DiskError(
                    "sandbox disks as images need root (loop devices and mounts); a gateway that is not root keeps \
                     them in memory: --disk-backend memory"
                        .into(),
                ));
            }
            Backend::Image => Some(template::mkfs()?),
            _ => None,
        };
        let disks = Disks { dir: dir.to_path_buf(), settings, mkfs };
        disks.forget_prepared();
        Ok(disks)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether this host can give sandboxes their disks, or what it lacks.
    pub fn check_host(&self) -> Result<(), DiskError> {
        match self.settings.backend {
            Backend::Image => loopdev::available().map_err(|e| {
                DiskError(format!("{e}; without loop devices start the gateway with --disk-backend memory"))
            }),
            _ => Ok(()),
        }
    }

    fn live(&self, id: Uuid) -> PathBuf {
        self.dir.join(format!("{id}.img"))
    }

    fn kept(&self, id: Uuid) -> PathBuf {
        self.dir.join(format!("{id}.kept.img"))
    }

    /// Sandboxes that have an image here, running or kept.
    pub fn ids(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".kept.img").or_else(|| name.strip_suffix(".img"))?.parse().ok()
            })
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// What the images hold now, on their filesystem.
    pub fn usage(&self) -> Usage {
        use std::os::unix::fs::MetadataExt;
        let mut u = Usage {
            path: self.dir.display().to_string(),
            reserve_bytes: self.settings.reserve_bytes,
            overcommit: self.settings.overcommit.max(1.0),
            ..Usage::default()
        };
        if let Ok(fs) = nix::sys::statvfs::statvfs(&self.dir) {
            u.total_bytes = fs.blocks() * fs.fragment_size();
            u.free_bytes = fs.blocks_available() * fs.fragment_size();
        }
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(m) = entry.metadata() else { continue };
            let held = m.blocks() * 512;
            if name.ends_with(".kept.img") {
                u.kept += 1;
                u.used_bytes += held;
            } else if name.starts_with(PREPARED) {
                // Made ahead: owed once a sandbox, admitted with its size, takes it.
                u.used_bytes += held;
            } else if name.ends_with(".img") {
                u.running += 1;
                u.used_bytes += held;
                u.owed_bytes += m.len().saturating_sub(held);
            }
        }
        u
    }

    /// Whether a new sandbox of `bytes` has room (`None`: its size is not known yet). A
    /// sandbox whose disk is not an image takes no disk: only the reserve is checked.
    pub fn room(&self, bytes: Option<u64>) -> Result<(), Shortage> {
        let usage = self.usage();
        let bytes = bytes.filter(|_| self.settings.backend == Backend::Image);
        if usage.fits(bytes) {
            return Ok(());
        }
        let asked = bytes.map(|b| format!(", the new sandbox asks for {}", human(b))).unwrap_or_default();
        let message = format!(
            "no disk space for a new sandbox on the filesystem of {}: {} free, running sandboxes may still write {}{asked}, \
             and {} stays free for the gateway and its database (--disk-reserve). Stop or delete sandboxes, ask \
             for a smaller disk (--disk), or free space there",
            usage.path,
            human(usage.free_bytes),
            human(usage.owed_bytes),
            human(usage.reserve_bytes),
        );
        Err(Shortage { message, usage, requested_bytes: bytes })
    }

    /// Makes the image of a new sandbox of `bytes`, once room is confirmed under the lock that
    /// every admission here takes (two creates cannot both take the last room). A repeated
    /// call for the same sandbox keeps its image.
    pub fn create(&self, id: Uuid, bytes: u64) -> Result<(), DiskError> {
        if self.settings.backend != Backend::Image {
            return Ok(());
        }
        let image = self.live(id);
        if image.exists() {
            return Ok(());
        }
        self.make_image(&image, bytes)
    }

    /// Copies the formatted template of `bytes` to `image`, under the disks' lock once room
    /// is confirmed.
    fn make_image(&self, image: &Path, bytes: u64) -> Result<(), DiskError> {
        if bytes < MIN_BYTES || bytes > self.settings.max_bytes {
            return Err(DiskError(format!(
                "template.disk_bytes {bytes}: between {} and the gateway's --max-disk {}",
                human(MIN_BYTES),
                human(self.settings.max_bytes)
            )));
        }
        let mkfs = self.mkfs.as_deref().ok_or_else(|| DiskError("mkfs.ext4 not found".into()))?;
        // 0600 like every file of the state directory.
        let lock = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.dir.join("lock"))
            .map_err(|e| err("disk lock", e))?;
        let _held =
            nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| err("disk lock", e))?;
        self.room(Some(bytes)).map_err(|s| DiskError(s.message))?;
        let template = template::template(&self.dir.join("templates"), mkfs, bytes)?;
        template::sparse_copy(&template, image)
    }

    /// A disk of `bytes` made ahead of its sandbox (the process driver's pool): its image
    /// copied, attached, mounted and laid out with no agent yet, then held as a detached tree
    /// (mounted nowhere). `None` when the disks are not images.
    pub fn prepare(&self, bytes: u64) -> Result<Option<Prepared>, DiskError> {
        if self.settings.backend != Backend::Image {
            return Ok(None);
        }
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{PREPARED}{}-{n}", std::process::id());
        let image = self.dir.join(format!("{name}.img"));
        self.make_image(&image, bytes)?;
        // Mounted in the disks' own folder (0700) only long enough to copy the mount.
        let at = self.dir.join(&name);
        let tree = std::fs::create_dir(&at)
            .map_err(|e| err(at.display(), e))
            .and_then(|()| mount::mount(&image, &at, None))
            .and_then(|()| tree::detach(&at).map_err(|e| err(format!("copying the mount at {}", at.display()), e)));
        let _ = mount::unmount(&at);
        let _ = std::fs::remove_dir(&at);
        match tree {
            Ok(tree) => Ok(Some(Prepared { image, tree: Some(tree) })),
            Err(e) => {
                let _ = std::fs::remove_file(&image);
                Err(e)
            }
        }
    }

    /// Makes `prepared` sandbox `id`'s disk, mounted at `at` (its folder): its image renamed
    /// to the sandbox's and its tree attached there. The agent's uid gets `work/` from the
    /// caller.
    pub fn take(&self, mut prepared: Prepared, id: Uuid, at: &Path) -> Result<(), DiskError> {
        let live = self.live(id);
        if live.exists() || mount::is_mounted(at) {
            return Err(DiskError(format!("sandbox {id} has a disk already")));
        }
        let tree = prepared.tree.take().ok_or_else(|| DiskError("a prepared disk taken twice".into()))?;
        std::fs::rename(&prepared.image, &live).map_err(|e| err(prepared.image.display(), e))?;
        if let Err(e) = tree::attach(&tree, at) {
            // Back where it was: dropping the tree then unmounts it, and `prepared` removes it.
            let _ = std::fs::rename(&live, &prepared.image);
            return Err(err(format!("attaching a prepared disk at {}", at.display()), e));
        }
        Ok(())
    }

    /// Removes prepared images a gateway left behind (their trees went with it).
    fn forget_prepared(&self) {
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(PREPARED)) {
                let path = entry.path();
                let _ = mount::unmount(&path);
                let _ = if path.is_dir() { std::fs::remove_dir(&path) } else { std::fs::remove_file(&path) };
            }
        }
    }

    /// Mounts a sandbox's image at `at` (its folder), laid out for the agent `uid`.
    pub fn mount(&self, id: Uuid, at: &Path, uid: Option<u32>) -> Result<(), DiskError> {
        if self.settings.backend != Backend::Image {
            return Ok(());
        }
        if mount::is_mounted(at) {
            // A start repeated after a crash: the disk is there already.
            return Ok(());
        }
        mount::mount(&self.live(id), at, uid)
    }

    /// A stopped sandbox's disk: unmounted, its image kept (it can no longer grow).
    pub fn release(&self, id: Uuid, at: &Path) -> Result<(), DiskError> {
        mount::unmount(at)?;
        let live = self.live(id);
        match std::fs::rename(&live, self.kept(id)) {
            // None to move: released already, by this stop or by another of the same sandbox
            // (the reconciler's, say) between our look and the rename.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r.map_err(|e| err(live.display(), e)),
        }
    }

    /// Removes a sandbox's disk (unmounted first, if it still is).
    pub fn remove(&self, id: Uuid, at: &Path) -> Result<(), DiskError> {
        mount::unmount(at)?;
        for image in [self.live(id), self.kept(id)] {
            match std::fs::remove_file(&image) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(err(image.display(), e)),
            }
        }
        Ok(())
    }
}
