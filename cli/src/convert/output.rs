//! Where converted output goes: stdout, or a temporary file beside OUT renamed into place
//! only on success (an existing OUT is never truncated by a failed conversion).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// An output being written.
pub enum Output {
    /// Standard output.
    Stdout(BufWriter<io::Stdout>),
    /// An existing special file (`/dev/null`, a FIFO): written in place, never replaced.
    Special(BufWriter<File>),
    /// A temporary file beside `dest`.
    File {
        w: BufWriter<File>,
        tmp: PathBuf,
        dest: PathBuf,
    },
}

impl Output {
    /// `-` is stdout; anything else a new temporary file beside `dest`.
    pub fn create(dest: &str) -> io::Result<Output> {
        if dest == "-" {
            return Ok(Output::Stdout(BufWriter::with_capacity(
                1 << 16,
                io::stdout(),
            )));
        }
        let dest = PathBuf::from(dest);
        if let Ok(meta) = fs::metadata(&dest) {
            if meta.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::Other,
                    format!("{} is a directory", dest.display()),
                ));
            }
            if !meta.is_file() {
                // A device or a pipe: renaming over it would replace it.
                let f = OpenOptions::new().write(true).open(&dest)?;
                return Ok(Output::Special(BufWriter::with_capacity(1 << 16, f)));
            }
        }
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        // create_new: never clobber a file someone else made.
        for n in 0..1000u32 {
            let tmp = dir.join(format!(".{}.{}.{}.tmp", file_name, std::process::id(), n));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(f) => {
                    return Ok(Output::File {
                        w: BufWriter::with_capacity(1 << 16, f),
                        tmp,
                        dest,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create a file in {}: {}", dir.display(), e),
                    ))
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::Other,
            format!("cannot create a temporary file in {}", dir.display()),
        ))
    }

    /// The writer.
    pub fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::Special(w) => w,
            Output::File { w, .. } => w,
        }
    }

    /// Flushes and moves the file into place; returns where it went (None: stdout).
    pub fn commit(self) -> io::Result<Option<PathBuf>> {
        match self {
            Output::Stdout(mut w) => {
                w.flush()?;
                Ok(None)
            }
            Output::Special(mut w) => {
                w.flush()?;
                Ok(None)
            }
            Output::File { w, tmp, dest } => {
                let done = w
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .and_then(|f| f.sync_all().map(|_| f));
                match done.and_then(|_| fs::rename(&tmp, &dest)) {
                    Ok(()) => Ok(Some(dest)),
                    Err(e) => {
                        let _ = fs::remove_file(&tmp);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Drops a file output (removes the temporary file it created).
    pub fn abandon(self) {
        if let Output::File { w, tmp, .. } = self {
            drop(w);
            let _ = fs::remove_file(&tmp);
        }
    }
}

/// The default output name for `input` converted to `ext`: the input's stem plus `ext`.
pub fn default_name(input: &Path, ext: &str) -> PathBuf {
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    input.with_file_name(format!("{}{}", stem, ext))
}
