//! A loop device over an image file: three ioctls of `linux/loop.h` (`LOOP_CTL_GET_FREE` on
//! `/dev/loop-control`, then `LOOP_CONFIGURE` on the device, Linux 5.8+), so no `losetup`
//! process per sandbox. The device is attached with `LO_FLAGS_AUTOCLEAR`: it detaches itself
//! once its last user (the mounted filesystem) lets go, so nothing is left to clean up after an
//! unmount, and a failed mount leaves no device behind.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::DiskError;

const LOOP_CONTROL: &str = "/dev/loop-control";
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_NAME_SIZE: usize = 64;
const LO_KEY_SIZE: usize = 32;

/// `struct loop_info64`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; LO_KEY_SIZE],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

nix::ioctl_none_bad!(loop_ctl_get_free, 0x4C82);
nix::ioctl_write_ptr_bad!(loop_configure, 0x4C0A, LoopConfig);

/// Whether this host lets us attach loop devices (the control device opens read-write).
pub fn available() -> Result<(), DiskError> {
    File::options()
        .read(true)
        .write(true)
        .open(LOOP_CONTROL)
        .map(drop)
        .map_err(|e| DiskError(format!("{LOOP_CONTROL}: {e} (a sandbox's disk is an image on a loop device)")))
}

/// An attached loop device; dropping the handle lets it detach once unused (autoclear).
pub struct Attached {
    pub path: PathBuf,
    _device: File,
}

/// Attaches `image` (opened read-write here) to a free loop device.
pub fn attach(image: &Path) -> Result<Attached, DiskError> {
    let control = File::options()
        .read(true)
        .write(true)
        .open(LOOP_CONTROL)
        .map_err(|e| DiskError(format!("{LOOP_CONTROL}: {e}")))?;
    let backing = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(image)
        .map_err(|e| DiskError(format!("{}: {e}", image.display())))?;
    // Another attacher may take the free device between the two calls: ask again.
    let mut last = None;
    for _ in 0..16 {
        // SAFETY: an ioctl without arguments on a descriptor we own.
        let n = unsafe { loop_ctl_get_free(control.as_raw_fd()) }
            .map_err(|e| DiskError(format!("{LOOP_CONTROL}: no free loop device: {e}")))?;
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let device = match File::options().read(true).write(true).open(&path) {
            Ok(d) => d,
            Err(e) => {
                last = Some(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let config = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: LO_FLAGS_AUTOCLEAR,
                lo_file_name: [0; LO_NAME_SIZE],
                lo_crypt_name: [0; LO_NAME_SIZE],
                lo_encrypt_key: [0; LO_KEY_SIZE],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: the kernel reads the struct we pass; the backing descriptor stays open
        // until the call returns (the device takes its own reference).
        match unsafe { loop_configure(device.as_raw_fd(), &config) } {
            Ok(_) => return Ok(Attached { path, _device: device }),
            Err(nix::errno::Errno::EBUSY) => last = Some(format!("{} was taken meanwhile", path.display())),
            Err(e) => {
                return Err(DiskError(format!(
                    "attaching {} to {}: {e} (LOOP_CONFIGURE needs Linux 5.8 or later)",
                    image.display(),
                    path.display()
                )));
            }
        }
    }
    Err(DiskError(format!("no loop device could be attached: {}", last.unwrap_or_default())))
}
