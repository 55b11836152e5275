//! The one output policy of every command that writes a file (`trace -o`, `trace --format`,
//! `convert -o`, `counters collect -o`):
//!
//! - `-` is standard output (where the command allows it).
//! - A new FILE is written as a temporary file created beside it and put in place only when
//!   the command says so (`trace` and `counters collect` once the session runs, `convert`
//!   once the conversion succeeded); a failure before that removes the temporary file and
//!   leaves nothing at FILE.
//! - An existing regular FILE is never replaced unless `--force` is given (then the
//!   temporary file is renamed over it at the same moment): nothing the command did not
//!   create is truncated or removed without being asked.
//! - An existing device or FIFO (`/dev/null`, `/dev/stdout`, a named pipe) is written in
//!   place, never replaced; a directory is an error.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::CliError;
use crate::term::clean;

/// The write buffer of every output.
const BUFFER: usize = 256 * 1024;

/// An output being written.
pub enum Output {
    /// Standard output.
    Stdout(BufWriter<io::Stdout>),
    /// An existing special file: written in place, never replaced.
    Special(BufWriter<File>),
    /// A temporary file beside `dest`, put in place by [`Output::place`].
    Temp {
        /// The temporary file.
        w: BufWriter<File>,
        /// Its path while it is not in place.
        temp: Option<PathBuf>,
        /// Where it goes.
        dest: PathBuf,
        /// Whether it replaces an existing file (`--force`).
        replace: bool,
    },
}

/// The path as the terminal may show it.
pub fn display(path: &Path) -> String {
    clean(&path.to_string_lossy()).into_owned()
}

impl Output {
    /// Standard output.
    pub fn stdout() -> Output {
        Output::Stdout(BufWriter::with_capacity(BUFFER, io::stdout()))
    }

    /// Checks that `dest` may be written and prepares it, changing nothing a user could see
    /// at `dest` (see the module docs for the policy).
    pub fn create(dest: &Path, force: bool) -> Result<Output, CliError> {
        let cannot = |e: io::Error| CliError::io(format!("cannot write {}", display(dest)), e);
        let replace = match fs::metadata(dest) {
            Ok(meta) if meta.is_dir() => {
                return Err(CliError::Failed(format!(
                    "cannot write {}: it is a directory",
                    display(dest)
                )))
            }
            Ok(meta) if !meta.is_file() => {
                let f = open_special(dest).map_err(cannot)?;
                return Ok(Output::Special(BufWriter::with_capacity(BUFFER, f)));
            }
            Ok(_) if !force => {
                return Err(CliError::Failed(format!(
                    "{} exists; not replacing it (--force replaces it)",
                    display(dest)
                )))
            }
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // "DIR/" names a directory that does not exist, not a file to create.
                if dest
                    .as_os_str()
                    .to_string_lossy()
                    .ends_with(std::path::is_separator)
                {
                    return Err(CliError::Failed(format!(
                        "cannot write {}: no such directory",
                        display(dest)
                    )));
                }
                if fs::symlink_metadata(dest).is_ok() {
                    return Err(CliError::Failed(format!(
                        "cannot write {}: it is a symbolic link to nothing",
                        display(dest)
                    )));
                }
                false
            }
            Err(e) => return Err(cannot(e)),
        };
        // A symbolic link to a file: the file is replaced (beside it), the link stays.
        let dest = match fs::symlink_metadata(dest) {
            Ok(m) if replace && m.file_type().is_symlink() => {
                fs::canonicalize(dest).map_err(cannot)?
            }
            _ => dest.to_path_buf(),
        };
        let (file, temp) = create_temp_beside(&dest).map_err(cannot)?;
        Ok(Output::Temp {
            w: BufWriter::with_capacity(BUFFER, file),
            temp: Some(temp),
            dest,
            replace,
        })
    }

    /// The writer.
    pub fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::Special(w) => w,
            Output::Temp { w, .. } => w,
        }
    }

    /// Puts the temporary file in place now (writing may go on). A new file never replaces
    /// one that appeared meanwhile; `--force` renames over the old one.
    pub fn place(&mut self) -> Result<(), CliError> {
        let (temp, dest, replace) = match self {
            Output::Temp {
                temp: Some(temp),
                dest,
                replace,
                ..
            } => (temp.clone(), dest.clone(), *replace),
            _ => return Ok(()),
        };
        let placed = if replace {
            fs::rename(&temp, &dest)
        } else {
            // A link never replaces a file; where links are not supported, rename.
            match fs::hard_link(&temp, &dest) {
                Ok(()) => fs::remove_file(&temp),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(io::Error::new(
                    e.kind(),
                    "it appeared meanwhile; not replacing it (--force replaces it)",
                )),
                Err(_) => fs::rename(&temp, &dest),
            }
        };
        match placed {
            Ok(()) => {
                if let Output::Temp { temp, .. } = self {
                    *temp = None;
                }
                Ok(())
            }
            Err(e) => Err(CliError::io(format!("cannot create {}", display(&dest)), e)),
        }
    }

    /// Flushes and puts the file in place; returns where it went (`None`: stdout or a
    /// special file). On an error the temporary file is removed.
    pub fn commit(mut self) -> Result<Option<PathBuf>, CliError> {
        let flushed = self.writer().flush();
        if let Err(e) = flushed {
            let context = match &self {
                Output::Temp { dest, .. } => format!("cannot write {}", display(dest)),
                _ => String::new(),
            };
            self.abandon();
            return Err(CliError::io(context, e));
        }
        let placed = self.place();
        match self {
            Output::Temp { dest, temp, .. } => match placed {
                Ok(()) => Ok(Some(dest)),
                Err(e) => {
                    if let Some(t) = temp {
                        let _ = fs::remove_file(t);
                    }
                    Err(e)
                }
            },
            _ => placed.map(|_| None),
        }
    }

    /// Drops the output, removing the temporary file if it was not put in place (nothing
    /// else is ever removed).
    pub fn abandon(self) {
        if let Output::Temp {
            w, temp: Some(t), ..
        } = self
        {
            drop(w);
            let _ = fs::remove_file(t);
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer().flush()
    }
}

/// Opens an existing special file for writing without creating or truncating it (and, on
/// Unix, without blocking on a FIFO nobody reads).
fn open_special(path: &Path) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    let file = o.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
    Ok(file)
}

/// A new file beside `path`, named after it (hidden, with this process's id).
fn create_temp_beside(path: &Path) -> io::Result<(File, PathBuf)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A long name leaves no room for the suffix (NAME_MAX is 255 bytes): use a short one.
    let base = path
        .file_name()
        .filter(|n| n.len() <= 200)
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| OsString::from("out"));
    let mut last = None;
    for n in 0..100u32 {
        let mut name = OsString::from(".");
        name.push(&base);
        name.push(format!(".dsipc-{}-{}.tmp", std::process::id(), n));
        let temp = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(f) => return Ok((f, temp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "no free name")))
}

/// A new file name in the current directory as the dotnet-* tools name their output,
/// `STEM_yyyyMMdd_HHmmssEXT` (UTC), with `_2`, `_3`, ... added when an earlier run in the
/// same second took the name: a default name never clashes with the previous run's file.
pub fn timestamped(stem: &str, ext: &str, now: std::time::SystemTime) -> PathBuf {
    let base = format!("{}_{}", stem, dsipc_trace::format::stamp(now));
    first_free(Path::new(""), &base, ext)
}

/// `DIR/STEMEXT`, or where a file already has that name the first free `DIR/STEM_2EXT`,
/// `STEM_3EXT`...: the one rule every default name follows. Bounded: past 1,000 the plain
/// name is given back, and refused as existing as any other.
fn first_free(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    let plain = dir.join(format!("{}{}", stem, ext));
    if fs::symlink_metadata(&plain).is_err() {
        return plain;
    }
    (2..=1000)
        .map(|n| dir.join(format!("{}_{}{}", stem, n, ext)))
        .find(|p| fs::symlink_metadata(p).is_err())
        .unwrap_or(plain)
}

/// The default output name for `input` converted to `ext`: the input's stem plus `ext`.
pub fn default_name(input: &Path, ext: &str) -> PathBuf {
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    input.with_file_name(format!("{}{}", stem, ext))
}

/// [`default_name`], or where a file already has it (the profile `trace --format` wrote
/// beside its trace, an earlier conversion), the first free `STEM_2EXT`, `STEM_3EXT`...:
/// a default name never meets an existing file (bounded: past 1,000 the name is refused as
/// existing, as any other).
pub fn free_default_name(input: &Path, ext: &str) -> PathBuf {
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    first_free(input.parent().unwrap_or_else(|| Path::new("")), &stem, ext)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_policy_never_replaces_without_force_and_removes_only_its_temp() {
        let dir = std::env::temp_dir().join(format!("dsipc-output-unit-{}", std::process::id()));
        // A failed earlier run (process ids repeat, under wine too) may have left it.
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let existing = dir.join("f");
        fs::write(&existing, b"keep").unwrap();
        // Refused without --force, untouched.
        let e = Output::create(&existing, false).err().unwrap().to_string();
        assert!(e.contains("--force"), "{}", e);
        assert_eq!(fs::read(&existing).unwrap(), b"keep");
        // Prepared with --force and abandoned: untouched, the temp gone.
        Output::create(&existing, true).ok().unwrap().abandon();
        assert_eq!(fs::read(&existing).unwrap(), b"keep");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        // A new file appears only when placed.
        let new = dir.join("new");
        let mut o = Output::create(&new, false).ok().unwrap();
        o.writer().write_all(b"trace").unwrap();
        assert!(!new.exists());
        o.place().ok().unwrap();
        o.writer().write_all(b" more").unwrap();
        assert_eq!(o.commit().ok().unwrap(), Some(new.clone()));
        assert_eq!(fs::read(&new).unwrap(), b"trace more");
        // --force replaces.
        let mut o = Output::create(&existing, true).ok().unwrap();
        o.writer().write_all(b"new").unwrap();
        o.commit().ok().unwrap();
        assert_eq!(fs::read(&existing).unwrap(), b"new");
        // A file that appeared meanwhile is not replaced.
        let late = dir.join("late");
        let mut o = Output::create(&late, false).ok().unwrap();
        fs::write(&late, b"theirs").unwrap();
        assert!(o.place().is_err());
        o.abandon();
        assert_eq!(fs::read(&late).unwrap(), b"theirs");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 3);
        // A directory is an error.
        assert!(Output::create(&dir, true).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
