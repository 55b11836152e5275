//! Test support for running dsipc over real Windows named pipes.
//!
//! Built with Rust 1.63 for `x86_64-pc-windows-gnu` and run under wine64 by
//! `scripts/build-windows.sh`. The Win32 calls are declared here by hand (no `windows-sys`,
//! whose current versions need a newer Rust) so that the workspace has no registry
//! dependency besides the core's own.
//!
//! - [`PipeServer`]: a plain blocking pipe server (the runtime listens on
//!   `\\.\pipe\dotnet-diagnostic-PID`), for a client that opens the pipe with
//!   `std::fs::OpenOptions`.
//! - The fake runtime is dsipc-testkit's [`FakeRuntime`](dsipc_testkit::FakeRuntime) (the
//!   one the Unix tests use, over dsipc-std's overlapped pipes here): [`fake_config`] is the
//!   identity these tests expect, [`listen`] and [`reverse`] start it on a pipe.

#[cfg(windows)]
pub use imp::*;

#[cfg(windows)]
mod imp {
    use std::ffi::OsStr;
    use std::fs::File;
    use std::io;
    use std::os::windows::ffi::OsStrExt;
    use std::os::windows::io::{FromRawHandle, RawHandle};
    use std::ptr;

    type Handle = *mut core::ffi::c_void;
    type Bool = i32;

    const INVALID_HANDLE_VALUE: Handle = -1isize as Handle;
    const PIPE_ACCESS_DUPLEX: u32 = 0x0000_0003;
    const FILE_FLAG_FIRST_PIPE_INSTANCE: u32 = 0x0008_0000;
    const PIPE_TYPE_BYTE: u32 = 0x0000_0000;
    const PIPE_READMODE_BYTE: u32 = 0x0000_0000;
    const PIPE_WAIT: u32 = 0x0000_0000;
    const PIPE_REJECT_REMOTE_CLIENTS: u32 = 0x0000_0008;
    const PIPE_UNLIMITED_INSTANCES: u32 = 255;
    const ERROR_PIPE_CONNECTED: i32 = 535;

    #[link(name = "kernel32")]
    extern "system" {
        fn CreateNamedPipeW(
            name: *const u16,
            open_mode: u32,
            pipe_mode: u32,
            max_instances: u32,
            out_buffer_size: u32,
            in_buffer_size: u32,
            default_timeout_ms: u32,
            security_attributes: *mut core::ffi::c_void,
        ) -> Handle;
        fn ConnectNamedPipe(pipe: Handle, overlapped: *mut core::ffi::c_void) -> Bool;
        fn GetCurrentProcessId() -> u32;
    }

    use std::path::Path;

    use dsipc::wire::{Command, Guid};
    use dsipc_testkit::{Config, FakeRuntime, StreamSpec};

    /// The pid the fake runtime reports unless a test sets another.
    pub const PID: u64 = 4242;

    /// The fake runtime's cookie.
    pub const COOKIE: Guid =
        Guid::from_fields(0x0123_4567, 0x89ab, 0xcdef, [1, 2, 3, 4, 5, 6, 7, 8]);

    /// The fake runtime of these tests: a .NET 8 runtime on win-x64 with pid [`PID`],
    /// [`COOKIE`], the command line `C:\app\App.exe --serve`, a small environment, and
    /// EventPipe streams of 1 MiB.
    pub fn fake_config() -> Config {
        Config::new()
            .pid(PID)
            .cookie(COOKIE)
            .command_line(r"C:\app\App.exe --serve")
            .environment(&["PATH=C:\\Windows", "DOTNET_gcServer=1"])
            .stream(StreamSpec::bytes(1024 * 1024))
    }

    /// Starts `config` serving the pipe `path` (`\\.\pipe\NAME`); clients can connect
    /// when this returns.
    pub fn listen(path: &Path, config: Config) -> std::io::Result<FakeRuntime> {
        config.listen_at(path).start()
    }

    /// Starts `config` connecting to the reverse port `path` (suspended until a
    /// ResumeRuntime arrives there), one command per connection, reconnecting after each.
    pub fn reverse(path: &Path, config: Config) -> FakeRuntime {
        config
            .reverse_port(path, true)
            .start()
            .expect("start the reverse runtime")
    }

    /// The commands `fake` received, in order (rejected requests left out).
    pub fn commands(fake: &FakeRuntime) -> Vec<Command> {
        fake.received()
            .iter()
            .filter(|r| r.rejection.is_none())
            .filter_map(|r| r.command)
            .collect()
    }

    /// Requests the fake runtime rejected.
    pub fn rejected(fake: &FakeRuntime) -> usize {
        fake.received()
            .iter()
            .filter(|r| r.rejection.is_some())
            .count()
    }

    /// `\\.\pipe\NAME`.
    pub fn pipe_path(name: &str) -> String {
        format!(r"\\.\pipe\{}", name)
    }

    /// A pipe name unique to this process and `tag`, shaped like the runtime's.
    pub fn unique_pipe_name(tag: &str) -> String {
        // SAFETY: no arguments, no preconditions.
        let pid = unsafe { GetCurrentProcessId() };
        format!("dotnet-diagnostic-{}-{}", pid, tag)
    }

    /// One server instance of a byte-mode, blocking named pipe: the runtime's side.
    #[derive(Debug)]
    pub struct PipeServer {
        file: File,
    }

    impl PipeServer {
        /// Creates `\\.\pipe\NAME` (first instance; fails if the name is taken). Clients can
        /// open it as soon as this returns.
        pub fn create(name: &str) -> io::Result<PipeServer> {
            let wide: Vec<u16> = OsStr::new(&pipe_path(name))
                .encode_wide()
                .chain(Some(0))
                .collect();
            // SAFETY: `wide` is NUL-terminated and outlives the call; null security
            // attributes mean the default descriptor.
            let handle = unsafe {
                CreateNamedPipeW(
                    wide.as_ptr(),
                    PIPE_ACCESS_DUPLEX | FILE_FLAG_FIRST_PIPE_INSTANCE,
                    PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
                    PIPE_UNLIMITED_INSTANCES,
                    16 * 1024,
                    16 * 1024,
                    0,
                    ptr::null_mut(),
                )
            };
            if handle == INVALID_HANDLE_VALUE {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a fresh handle that nothing else owns; `File` closes it on drop.
            let file = unsafe { File::from_raw_handle(handle as RawHandle) };
            Ok(PipeServer { file })
        }

        /// Waits for a client (returns at once if one connected already) and hands back the
        /// connected pipe as a `File`: read and write it, drop it to close the connection.
        pub fn accept(self) -> io::Result<File> {
            use std::os::windows::io::AsRawHandle;
            // SAFETY: the handle is a valid pipe handle owned by `self.file`; no overlapped.
            let ok =
                unsafe { ConnectNamedPipe(self.file.as_raw_handle() as Handle, ptr::null_mut()) };
            if ok == 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() != Some(ERROR_PIPE_CONNECTED) {
                    return Err(err);
                }
            }
            Ok(self.file)
        }
    }
}
