//! Config files: read, and errors naming the file; the shipped `wheel.toml` is valid; files that
//! are not plain config files (unreadable paths and permissions, bad UTF-8, a BOM and CRLF, FIFOs
//! with and without a writer, endless devices, huge files) end in a typed error in bounded time
//! and memory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use wheel_shard::{Config, ConfigError};

use super::*;
#[cfg(target_os = "linux")]
use crate::child::*;
use crate::common::within;
use crate::skip;

#[test]
fn files_are_read_and_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "shards = 4\n").unwrap();
    assert_eq!(Config::from_file(&good).unwrap().shards, 4);

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "tick = \"0s\"\n").unwrap();
    let error = Config::from_file(&bad).unwrap_err();
    assert_eq!(error.field(), Some("tick"));
    assert!(error.to_string().contains("bad.toml"), "{error}");

    let missing = Config::from_file(dir.path().join("missing.toml")).unwrap_err();
    assert!(matches!(missing, ConfigError::Io { .. }), "{missing}");
}

#[test]
fn the_shipped_wheel_toml_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../wheel.toml");
    let config = Config::from_file(path).unwrap();
    assert_eq!(config.tick, Duration::from_millis(1));
}

/// A directory, a name too long, a path through a regular file, a dangling symlink, a symlink
/// loop, an empty path, a path with a NUL byte and `/proc/self/mem`: each is `ConfigError::Io`
/// naming the path, with no field.
#[cfg(target_os = "linux")]
#[test]
fn paths_that_cannot_be_read_are_io_errors_naming_the_path() {
    within(PARSE_LIMIT, || {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file.toml");
        std::fs::write(&file, "shards = 2\n").unwrap();
        let dangling = dir.path().join("dangling.toml");
        std::os::unix::fs::symlink(dir.path().join("nowhere.toml"), &dangling).unwrap();
        let looped = dir.path().join("loop.toml");
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        let paths: [(PathBuf, &str); 8] = [
            (dir.path().to_path_buf(), "a directory"),
            (PathBuf::from("n".repeat(5000)), "a name too long"),
            (file.join("inner.toml"), "a path through a file"),
            (dangling, "a dangling symlink"),
            (looped, "a symlink loop"),
            (PathBuf::new(), "an empty path"),
            (PathBuf::from("wheel\0.toml"), "a NUL byte"),
            (PathBuf::from("/proc/self/mem"), "unreadable at offset 0"),
        ];
        for (path, what) in paths {
            let error = Config::from_file(&path).expect_err(what);
            assert!(
                matches!(&error, ConfigError::Io { path: named, .. } if *named == path),
                "{what}: {error:?}"
            );
            assert_eq!(error.field(), None, "{what}");
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("cannot read config file {}", path.display())),
                "{what}: {error}"
            );
        }
    });
}

/// The file [`child_reads_an_unreadable_file`] reads.
#[cfg(target_os = "linux")]
const UNREADABLE_VAR: &str = "HOSTILE_CONFIG_UNREADABLE";

/// A file without read permission is `ConfigError::Io` (PermissionDenied) naming it. A process
/// that reads it anyway (root, as CI runs) checks it in a child running as `nobody`; one that
/// can do neither (`CAP_DAC_OVERRIDE` without root) records a skip.
#[cfg(target_os = "linux")]
#[test]
fn an_unreadable_file_is_a_permission_error_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Traversable by `nobody`, so the refusal is the file's own.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("secret.toml");
    std::fs::write(&path, "shards = 2\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    let result = if std::fs::File::open(&path).is_err() {
        describe(&within(PARSE_LIMIT, {
            let path = path.clone();
            move || Config::from_file(&path)
        }))
    } else if is_root() {
        let run = run_child_as(
            "child_reads_an_unreadable_file",
            Some(NOBODY),
            None,
            &[(UNREADABLE_VAR, path.clone().into_os_string())],
            Duration::from_secs(30),
        );
        if run.could_not_start() {
            // `sh` could not run the test binary as `nobody`: it lies below a directory only
            // root may enter (a checkout under /root, say).
            skip::record(
                "the test binary cannot be run as nobody, and as root this process reads a \
                 file of mode 000",
                "run the test from a checkout every user may read (e.g. under /tmp), or as an \
                 unprivileged user",
            );
            return;
        }
        run.assert_passed();
        run.report("result")
    } else {
        skip::record(
            "this process reads a file of mode 000 (CAP_DAC_OVERRIDE without root), so a \
             permission error cannot be provoked",
            "run the test as an unprivileged user, or as root",
        );
        return;
    };
    assert!(
        result.starts_with("err field=None io=PermissionDenied") && result.contains("secret.toml"),
        "{result}"
    );
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of an_unreadable_file_is_a_permission_error_naming_it"]
fn child_reads_an_unreadable_file() {
    if !in_child("child_reads_an_unreadable_file") {
        return;
    }
    let path = std::env::var_os(UNREADABLE_VAR).unwrap();
    report("result", describe(&Config::from_file(path)));
}

/// Bytes that are not UTF-8 (in a comment, where TOML would allow any text) are `Io`
/// (InvalidData) naming the file; an empty file is the default config.
#[cfg(target_os = "linux")]
#[test]
fn invalid_utf8_is_an_io_error_naming_the_file_and_an_empty_file_is_the_default() {
    within(PARSE_LIMIT, || {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("latin1.toml");
        std::fs::write(&bad, b"shards = 3\n# caf\xe9\n").unwrap();
        let error = Config::from_file(&bad).unwrap_err();
        match &error {
            ConfigError::Io { path, source } => {
                assert_eq!(path, &bad);
                assert_eq!(source.kind(), std::io::ErrorKind::InvalidData, "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            error.to_string().contains("latin1.toml") && error.to_string().contains("UTF-8"),
            "{error}"
        );
        let empty = dir.path().join("empty.toml");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(Config::from_file(&empty).unwrap(), Config::default());
    });
}

/// A UTF-8 byte order mark and CRLF line endings (a file saved on Windows) read exactly like
/// the plain file.
#[cfg(target_os = "linux")]
#[test]
fn a_bom_and_crlf_line_endings_read_like_the_plain_file() {
    within(PARSE_LIMIT, || {
        let dir = tempfile::tempdir().unwrap();
        let plain = "shards = 3\n# a comment\ntick = \"250us\"\nmax_pending = 7\n";
        let windows = format!("\u{feff}{}", plain.replace('\n', "\r\n"));
        let (a, b) = (
            dir.path().join("plain.toml"),
            dir.path().join("windows.toml"),
        );
        std::fs::write(&a, plain).unwrap();
        std::fs::write(&b, windows).unwrap();
        let expected = Config::from_file(&a).unwrap();
        assert_eq!(expected.tick, Duration::from_micros(250));
        assert_eq!(Config::from_file(&b).unwrap(), expected);
    });
}

/// A FIFO that a writer feeds (`--config <(generate)` in a shell) is refused at once, as the
/// docs say: not a regular file, an `Io` error naming it (its text can be read by the caller
/// and given to `from_toml_str`); the writer is released, not left waiting.
#[cfg(target_os = "linux")]
#[test]
fn a_fifo_with_a_writer_is_refused_as_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = make_fifo(dir.path());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            // Blocks until a reader opens the FIFO; its write then finds the reader gone.
            let mut pipe = std::fs::OpenOptions::new().write(true).open(fifo)?;
            pipe.write_all(b"shards = 3\n")
        })
    };
    let result = within(Duration::from_secs(10), {
        let fifo = fifo.clone();
        move || Config::from_file(&fifo)
    });
    match result {
        Err(ConfigError::Io { path, source }) => {
            assert_eq!(path, fifo);
            assert!(
                source.to_string().contains("not a regular file"),
                "{source}"
            );
        }
        other => panic!("a FIFO was read: {other:?}"),
    }
    // The writer may not have opened the FIFO before `from_file` closed it: then it waits in
    // open(2) for a reader, which this one (non-blocking, so it does not wait for a writer)
    // gives it, and its write then lands in the pipe.
    let release = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .expect("open the FIFO to release the writer")
    };
    let _ = within(Duration::from_secs(10), move || writer.join().unwrap());
    drop(release);
}

/// A FIFO nobody writes to must not hang `from_file`: it should return within 2 s (an error
/// naming the file, say that it is not a regular file). When it blocks, the test releases it by
/// opening the FIFO for writing, and fails.
#[cfg(target_os = "linux")]
#[test]
fn a_fifo_without_a_writer_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = make_fifo(dir.path());
    let (done_tx, done) = mpsc::channel();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let result = Config::from_file(&fifo);
            let _ = done_tx.send(());
            result
        })
    };
    let returned = done.recv_timeout(Duration::from_secs(2)).is_ok();
    if !returned {
        // The reader waits in open(2); a writer's open completes both, and its close is EOF.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
    }
    let result = reader.join().expect("from_file panicked");
    assert!(
        returned,
        "from_file on a FIFO with no writer was still blocked after 2 s; released by a writer \
         that wrote nothing, it returned {result:?}"
    );
    assert!(
        matches!(&result, Err(ConfigError::Io { path, .. }) if *path == fifo),
        "{result:?}"
    );
}

#[cfg(target_os = "linux")]
fn make_fifo(dir: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let path = dir.join("config.fifo");
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    path
}

// ---- endless and huge input ----

/// The address space of a child reading endless input: enough for the test binary (about 75
/// MiB) and a few hundred MiB of input, so that an unbounded read fails long before it could
/// hurt the machine.
#[cfg(target_os = "linux")]
const ENDLESS_CHILD_KIB: u64 = 1 << 20;

/// The devices [`child_reads_endless_input`] reads, by the variable it takes them from.
#[cfg(target_os = "linux")]
const ENDLESS_VAR: &str = "HOSTILE_CONFIG_ENDLESS";

/// Reads `/dev/zero` or `/dev/urandom` (NUL bytes, which are valid UTF-8, or random bytes)
/// in a child limited to 1 GiB of address space: a peak and a result for each.
#[cfg(target_os = "linux")]
fn endless_runs() -> Vec<(&'static str, ChildRun)> {
    ["/dev/zero", "/dev/urandom"]
        .into_iter()
        .map(|device| {
            let run = run_child(
                "child_reads_endless_input",
                Some(ENDLESS_CHILD_KIB),
                &[(ENDLESS_VAR, device.into())],
                Duration::from_secs(60),
            );
            run.assert_passed();
            eprintln!(
                "{device}: {} after {} ms, peak +{} KiB",
                run.report("result"),
                run.number("millis"),
                run.number("peak_growth_kib")
            );
            (device, run)
        })
        .collect()
}

/// Endless input in a process whose memory is limited (`ulimit -v`) ends in a typed error
/// naming the device, in bounded time: no hang and no abort. (How much it reads first is
/// [`endless_input_is_refused_before_it_fills_memory`].)
#[cfg(target_os = "linux")]
#[test]
fn endless_input_under_a_memory_limit_is_an_io_error_not_an_abort() {
    for (device, run) in endless_runs() {
        let result = run.report("result");
        assert!(
            result.starts_with("err field=None io=") && result.contains(device),
            "{device}: {result}"
        );
    }
}

/// Endless input must be refused once it is longer than any config could be, before it
/// takes memory: a config file is a few KiB, so reading `/dev/zero` may take a few MiB at
/// most, not everything the process may allocate.
#[cfg(target_os = "linux")]
#[test]
fn endless_input_is_refused_before_it_fills_memory() {
    for (device, run) in endless_runs() {
        let peak_mib = run.number("peak_growth_kib") / 1024;
        assert!(
            peak_mib <= 64,
            "{device}: reading it took {peak_mib} MiB (all the 1 GiB address space allowed, \
             less the binary) before it ended in {}",
            run.report("result")
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of the endless-input tests; does nothing unless they run it"]
fn child_reads_endless_input() {
    if !in_child("child_reads_endless_input") {
        return;
    }
    let device = std::env::var(ENDLESS_VAR).unwrap();
    let result = measured(|| Config::from_file(&device));
    report("result", describe(&result));
}

/// The huge files [`child_reads_huge_files`] reads, `:`-separated.
#[cfg(target_os = "linux")]
const HUGE_VAR: &str = "HOSTILE_CONFIG_HUGE";

/// Two huge files that would be valid TOML, 200 MB of blank space and a 50 MB comment line,
/// each followed by `shards = 3`, are refused with an `Io` error naming the file ("longer
/// than" `limits::MAX_FILE_BYTES`) after reading at most that much: a few MiB of memory, in
/// well under a second. A file of exactly the limit is still read.
#[cfg(target_os = "linux")]
#[test]
fn a_huge_file_is_refused_after_reading_at_most_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let blank = dir.path().join("blank.toml");
    let comment = dir.path().join("comment.toml");
    let mut file = std::fs::File::create(&blank).unwrap();
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..200_000_000 / spaces.len() {
        file.write_all(&spaces).unwrap();
    }
    file.write_all(b"\n \t\r\n\nshards = 3\n").unwrap();
    drop(file);
    let mut file = std::fs::File::create(&comment).unwrap();
    file.write_all(b"#").unwrap();
    let letters = vec![b'x'; 1 << 20];
    for _ in 0..50_000_000 / letters.len() {
        file.write_all(&letters).unwrap();
    }
    file.write_all(b"\nshards = 3\n").unwrap();
    drop(file);
    let files = [blank, comment];
    let joined = std::env::join_paths(&files).unwrap();
    let run = run_child(
        "child_reads_huge_files",
        None,
        &[(HUGE_VAR, joined)],
        Duration::from_secs(60),
    );
    run.assert_passed();
    let results = run.reports("result");
    let peaks = run.reports("peak_growth_kib");
    let millis = run.reports("millis");
    assert_eq!(results.len(), 2, "{}", run.output());
    for (i, path) in files.iter().enumerate() {
        let peak_kib: u64 = peaks[i].parse().unwrap();
        let millis: u64 = millis[i].parse().unwrap();
        eprintln!(
            "{}: refused in {millis} ms, peak +{peak_kib} KiB: {}",
            path.display(),
            results[i]
        );
        assert!(
            results[i].starts_with("err field=None io=") && results[i].contains("longer than"),
            "{}: {}",
            path.display(),
            results[i]
        );
        assert!(peak_kib <= 16 << 10, "{}: {peak_kib} KiB", path.display());
        assert!(millis < 5_000, "{}: {millis} ms", path.display());
    }
    let limit = wheel_shard::limits::MAX_FILE_BYTES as usize;
    let at_limit = dir.path().join("at_limit.toml");
    let tail = b"\nshards = 3\n";
    let mut text = vec![b' '; limit - tail.len()];
    text.extend_from_slice(tail);
    std::fs::write(&at_limit, &text).unwrap();
    assert_eq!(Config::from_file(&at_limit).unwrap().shards, 3);
    text.insert(0, b' ');
    std::fs::write(&at_limit, &text).unwrap();
    assert!(matches!(
        Config::from_file(&at_limit),
        Err(ConfigError::Io { .. })
    ));
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of a_huge_file_is_refused_after_reading_at_most_the_limit"]
fn child_reads_huge_files() {
    if !in_child("child_reads_huge_files") {
        return;
    }
    for path in std::env::split_paths(&std::env::var_os(HUGE_VAR).unwrap()) {
        // The peak of each file apart: the first file's memory is freed before the second.
        let result = measured(|| Config::from_file(&path));
        report("result", describe(&result));
    }
}

/// Whether this process runs as root.
#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid takes no argument, touches no memory and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
