//! Where a cluster may live, and the checks that keep every change the
//! tools make inside the cluster's own directory
//! (`docs/design/cluster-dir.md`, "Where clusters live"):
//!
//! - a cluster **name** is one path component of letters, digits, `-`,
//!   `_` and `.` (not `.` or `..`), at most [`NAME_MAX`] bytes
//!   ([`check_name`]); it stands for `<base>/<name>`;
//! - a cluster **directory** given by path must be new, or one this user's
//!   tools made: it holds the marker file [`MARKER_FILE`], checked before
//!   anything in it is changed ([`claim_dir`], [`check_marked`]);
//! - the directory a cluster directory is made in (the **base**, or the
//!   parent of a path) must belong to this user, or to root and not be
//!   open to others' renames (sticky, or writable by its owner alone);
//!   the base is never a symbolic link, and is created rwx------ (or
//!   rwx-wx-wx with the sticky bit for clusters that allow other users)
//!   (`prepare_parent`);
//! - a cluster directory is never reached through a symbolic link: it is
//!   opened `O_NOFOLLOW | O_DIRECTORY` and checked to be this user's.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::cluster::{base_dir, ClusterError};

/// Longest cluster name, in bytes.
pub const NAME_MAX: usize = 64;

/// The marker file the tools write into every cluster directory they
/// make: a directory without it (or not this user's) is never taken over
/// or removed.
pub const MARKER_FILE: &str = ".nic-cluster";

/// What the marker file says (its first line is checked).
const MARKER_TEXT: &str = "nic-cluster directory 1\n\
    made by the nic-cluster tools; `nic-cluster stop` removes this directory and everything in it\n";

/// Is `name` a cluster name? `Err` says why not.
pub fn check_name(name: &str) -> Result<(), String> {
    const RULE: &str = "a cluster name is one path component of letters, digits, `-`, `_` and \
                        `.` (not `.` or `..`), at most 64 bytes; give a directory with --dir";
    if name.is_empty() {
        return Err(format!("the name is empty: {RULE}"));
    }
    if name.len() > NAME_MAX {
        return Err(format!("{} bytes long: {RULE}", name.len()));
    }
    if name == "." || name == ".." {
        return Err(format!("`{name}` names a directory, not a cluster: {RULE}"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(*c))) {
        return Err(format!("it holds {c:?}: {RULE}"));
    }
    Ok(())
}

/// The error for a bad name.
fn bad_name(name: &str, why: String) -> ClusterError {
    ClusterError::Io {
        path: PathBuf::from(format!("cluster name {name:?}")),
        err: io::Error::new(io::ErrorKind::InvalidInput, why),
    }
}

/// A refusal about `path`, said as an I/O error of `kind`.
pub(crate) fn refused(path: &Path, kind: io::ErrorKind, why: impl Into<String>) -> ClusterError {
    ClusterError::Io { path: path.to_path_buf(), err: io::Error::new(kind, why.into()) }
}

/// Where a cluster lives: a name under the base directory, or a directory
/// given by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterLocation {
    /// `<base>/<name>` (`base_dir()`).
    Name(String),
    /// A directory given by path (absolute); its last component, a valid
    /// name, is the cluster's name.
    Dir(PathBuf),
}

impl ClusterLocation {
    /// A cluster name (`check_name`).
    pub fn name(name: &str) -> Result<ClusterLocation, ClusterError> {
        check_name(name).map_err(|why| bad_name(name, why))?;
        Ok(ClusterLocation::Name(name.to_string()))
    }

    /// A cluster directory given by path: made absolute (not resolved:
    /// `..` stays), its last component a valid name.
    pub fn dir(path: &Path) -> Result<ClusterLocation, ClusterError> {
        let abs = std::path::absolute(path)
            .map_err(|err| ClusterError::Io { path: path.to_path_buf(), err })?;
        let last = match path.components().next_back() {
            Some(std::path::Component::Normal(n)) => n.to_str(),
            _ => None,
        };
        let Some(last) = last else {
            return Err(refused(
                path,
                io::ErrorKind::InvalidInput,
                "a cluster directory's path ends in its name (not in `/`, `.` or `..`)",
            ));
        };
        check_name(last).map_err(|why| {
            refused(path, io::ErrorKind::InvalidInput, format!("its last component: {why}"))
        })?;
        Ok(ClusterLocation::Dir(abs))
    }

    /// A name, or a path when it holds a `/`.
    pub fn parse(name_or_path: &str) -> Result<ClusterLocation, ClusterError> {
        if name_or_path.contains('/') {
            ClusterLocation::dir(Path::new(name_or_path))
        } else {
            ClusterLocation::name(name_or_path)
        }
    }

    /// The cluster directory.
    pub fn path(&self) -> PathBuf {
        match self {
            ClusterLocation::Name(n) => base_dir().join(n),
            ClusterLocation::Dir(d) => d.clone(),
        }
    }

    /// The cluster's name (the manifest's `name`).
    pub fn cluster_name(&self) -> String {
        match self {
            ClusterLocation::Name(n) => n.clone(),
            ClusterLocation::Dir(d) => {
                d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            }
        }
    }

    /// How a command line names it: the option (`--name` or `--dir`) and
    /// its value.
    pub fn args(&self) -> [String; 2] {
        match self {
            ClusterLocation::Name(n) => ["--name".into(), n.clone()],
            ClusterLocation::Dir(d) => ["--dir".into(), d.display().to_string()],
        }
    }
}

impl std::fmt::Display for ClusterLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterLocation::Name(n) => f.write_str(n),
            ClusterLocation::Dir(d) => write!(f, "{}", d.display()),
        }
    }
}

/// This process's effective uid.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// A user's name from the password file, if it has one there.
pub fn user_name(uid: u32) -> Option<String> {
    let text = fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// `uid 1001 (alice)`, or `uid 1001` for a uid without a name.
pub fn describe_uid(uid: u32) -> String {
    match user_name(uid) {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

/// Is `uid` a user id a cluster may allow? Every uid but `u32::MAX`,
/// which the kernel takes for "no user" (`(uid_t) -1`).
pub fn check_uid(uid: u32) -> Result<(), String> {
    if uid == u32::MAX {
        return Err(format!(
            "{uid} is not a user id (it is (uid_t) -1, which the kernel takes for \"no user\")"
        ));
    }
    Ok(())
}

/// May this user make and keep cluster directories in `dir` (the base, or
/// a given path's parent), whose metadata is `md`? Its own directory, or
/// root's where nobody else may rename what is in it.
fn check_owner(dir: &Path, md: &fs::Metadata, what: &str) -> Result<(), ClusterError> {
    let (owner, mode, me) = (md.uid(), md.mode(), euid());
    let others_may_rename = mode & 0o022 != 0 && mode & 0o1000 == 0;
    if owner == me || (owner == 0 && !others_may_rename) {
        return Ok(());
    }
    let why = if owner == 0 {
        format!(
            "{what} is root's and writable by others without the sticky bit (mode {:04o}): \
             another user could swap the clusters in it",
            mode & 0o7777
        )
    } else {
        format!(
            "{what} is owned by {}, not by you ({}){}: another user's directory could swap \
             or redirect the clusters in it; set {} to a directory of your own",
            describe_uid(owner),
            describe_uid(me),
            if me == 0 { "" } else { " or root" },
            crate::cluster::CLUSTER_DIR_ENV,
        )
    };
    Err(refused(dir, io::ErrorKind::PermissionDenied, why))
}

/// Make sure `parent`, the directory the cluster directory `path` is made
/// in, may hold it: the base directory (`base_dir()`) is created if
/// missing (rwx------, or rwx-wx-wx and sticky when `shared`: clusters
/// that allow other users, who must pass through it), never a symbolic
/// link, and this user's or root's (`check_owner`); a shared cluster in
/// the default base (`default_base_dir`) of this user's that others
/// cannot pass through gets `--x` for group and others added (a base the
/// user chose is refused instead, saying so). A given path's parent is created if missing
/// (as `mkdir -p` would) and checked the same way, through any links in
/// it (the user named it).
pub(crate) fn prepare_parent(path: &Path, shared: bool) -> Result<(), ClusterError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let base = base_dir();
    if parent == base {
        return prepare_base(&base, shared);
    }
    if !parent.exists() {
        fs::create_dir_all(parent)
            .map_err(|err| ClusterError::Io { path: parent.to_path_buf(), err })?;
    }
    let md =
        fs::metadata(parent).map_err(|err| ClusterError::Io { path: parent.to_path_buf(), err })?;
    if !md.is_dir() {
        return Err(refused(parent, io::ErrorKind::NotADirectory, "not a directory"));
    }
    check_owner(parent, &md, "the directory the cluster directory is made in")
}

/// `prepare_parent` for the base directory.
pub fn prepare_base(base: &Path, shared: bool) -> Result<(), ClusterError> {
    let io_err = |err| ClusterError::Io { path: base.to_path_buf(), err };
    for _ in 0..2 {
        match fs::symlink_metadata(base) {
            Ok(md) if md.file_type().is_symlink() => {
                let to = fs::read_link(base).map(|t| t.display().to_string()).unwrap_or_default();
                return Err(refused(
                    base,
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "the base directory of clusters is a symbolic link (to {to}, owned by \
                         {}): refused, clusters are never made through a link",
                        describe_uid(md.uid())
                    ),
                ));
            }
            Ok(md) if !md.is_dir() => {
                return Err(refused(
                    base,
                    io::ErrorKind::NotADirectory,
                    "the base directory of clusters is not a directory",
                ))
            }
            Ok(md) => {
                check_owner(base, &md, "the base directory of clusters")?;
                if shared && md.uid() == euid() && md.mode() & 0o011 != 0o011 {
                    // The tools' own base is opened for passage (`--x`);
                    // a directory the user chose is left as it is.
                    if base != crate::cluster::default_base_dir() {
                        return Err(refused(
                            base,
                            io::ErrorKind::PermissionDenied,
                            format!(
                                "the base directory of clusters is mode {:04o}: the users a \
                                 cluster allows could not pass through it to the cluster; \
                                 give it `--x` for them (chmod go+x) or set {} to another",
                                md.mode() & 0o7777,
                                crate::cluster::CLUSTER_DIR_ENV
                            ),
                        ));
                    }
                    let fd = open_dir_nofollow(base)?;
                    let mode = Mode::from_raw_mode((md.mode() & 0o7777) | 0o011);
                    rustix::fs::fchmod(&fd, mode).map_err(|e| io_err(e.into()))?;
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(p) = base.parent().filter(|p| !p.as_os_str().is_empty()) {
                    fs::create_dir_all(p)
                        .map_err(|err| ClusterError::Io { path: p.to_path_buf(), err })?;
                }
                let mode = if shared { 0o1733 } else { 0o700 };
                match fs::DirBuilder::new().mode(0o700).create(base) {
                    Ok(()) => {
                        // The umask may have taken bits away: set them.
                        let fd = open_dir_nofollow(base)?;
                        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
                            .map_err(|e| io_err(e.into()))?;
                        return Ok(());
                    }
                    // Made by another process meanwhile: check it.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io_err(e)),
                }
            }
            Err(e) => return Err(io_err(e)),
        }
    }
    Err(refused(base, io::ErrorKind::Other, "the base directory keeps changing"))
}

/// Open directory `path` without following a symbolic link at its end.
pub(crate) fn open_dir_nofollow(path: &Path) -> Result<OwnedFd, ClusterError> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
            let what = match fs::symlink_metadata(path) {
                Ok(md) if md.file_type().is_symlink() => {
                    let to =
                        fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
                    format!("a symbolic link (to {to}): a cluster directory is never reached through a link")
                }
                _ => "not a directory".to_string(),
            };
            refused(path, io::ErrorKind::PermissionDenied, what)
        } else {
            ClusterError::Io { path: path.to_path_buf(), err: e.into() }
        }
    })
}

/// Is the open directory `fd` (at `path`) one of this user's cluster
/// directories: this user's, holding this user's marker file? `Err` says
/// why not.
fn check_marked_fd(path: &Path, fd: &OwnedFd) -> Result<(), ClusterError> {
    let st = rustix::fs::fstat(fd)
        .map_err(|e| ClusterError::Io { path: path.to_path_buf(), err: e.into() })?;
    if st.st_uid != euid() {
        return Err(refused(
            path,
            io::ErrorKind::PermissionDenied,
            format!(
                "exists and is owned by {}, not by you ({}): not a cluster directory of yours; \
                 nothing in it was changed",
                describe_uid(st.st_uid),
                describe_uid(euid())
            ),
        ));
    }
    let not_marked = |why: &str| {
        refused(
            path,
            io::ErrorKind::AlreadyExists,
            format!(
                "exists and is not a cluster directory ({why}; the tools write {MARKER_FILE} \
                 into every cluster directory they make): refused, nothing in it was changed or \
                 removed; give a new directory, or remove this one yourself"
            ),
        )
    };
    let marker = match rustix::fs::openat(
        fd,
        MARKER_FILE,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(m) => m,
        Err(rustix::io::Errno::NOENT) => return Err(not_marked("no marker file")),
        Err(rustix::io::Errno::LOOP) => return Err(not_marked("its marker is a symbolic link")),
        Err(e) => return Err(ClusterError::Io { path: path.join(MARKER_FILE), err: e.into() }),
    };
    let ms = rustix::fs::fstat(&marker)
        .map_err(|e| ClusterError::Io { path: path.join(MARKER_FILE), err: e.into() })?;
    if rustix::fs::FileType::from_raw_mode(ms.st_mode) != rustix::fs::FileType::RegularFile
        || ms.st_uid != euid()
    {
        return Err(not_marked("its marker is not a file of yours"));
    }
    let mut buf = [0u8; 64];
    let n = rustix::io::read(&marker, &mut buf).unwrap_or(0);
    let first = MARKER_TEXT.lines().next().unwrap_or_default();
    if !buf[..n].starts_with(first.as_bytes()) {
        return Err(not_marked("its marker does not say it is one"));
    }
    Ok(())
}

/// Is `path` one of this user's cluster directories (not a link, this
/// user's, holding this user's marker)? `Err` says why not. `remove` and
/// `create` ask this before they change anything in it.
pub fn check_marked(path: &Path) -> Result<(), ClusterError> {
    let fd = open_dir_nofollow(path)?;
    check_marked_fd(path, &fd)
}

/// Make the cluster directory `path` ready to be filled: new (made
/// rwx------, or rwx--x--x when `reachable`, with the marker inside), or
/// already one of this user's cluster directories (`check_marked`; its
/// mode set as above). Its parent is checked first (`prepare_parent`;
/// `shared` for a cluster that allows other users). Returns whether the
/// directory was made now. Nothing is changed before every check passed.
pub fn claim_dir(path: &Path, reachable: bool) -> Result<bool, ClusterError> {
    prepare_parent(path, reachable)?;
    let mode = Mode::from_raw_mode(if reachable { 0o711 } else { 0o700 });
    let io_err =
        |e: rustix::io::Errno| ClusterError::Io { path: path.to_path_buf(), err: e.into() };
    let made = match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(err) => return Err(ClusterError::Io { path: path.to_path_buf(), err }),
    };
    let fd = open_dir_nofollow(path)?;
    if made {
        let st = rustix::fs::fstat(&fd).map_err(io_err)?;
        if st.st_uid != euid() {
            return Err(refused(
                path,
                io::ErrorKind::PermissionDenied,
                "was replaced by another user's directory while being made",
            ));
        }
        let m = rustix::fs::openat(
            &fd,
            MARKER_FILE,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| ClusterError::Io { path: path.join(MARKER_FILE), err: e.into() })?;
        rustix::io::write(&m, MARKER_TEXT.as_bytes())
            .map_err(|e| ClusterError::Io { path: path.join(MARKER_FILE), err: e.into() })?;
    } else {
        check_marked_fd(path, &fd)?;
    }
    rustix::fs::fchmod(&fd, mode).map_err(io_err)?;
    Ok(made)
}

/// Create (or open, to write from its end) the file `name` in this user's
/// cluster directory `dir` (`check_marked` first), without following a
/// link: a log a device process started in the background writes to.
pub fn open_in_cluster(dir: &Path, name: &str, truncate: bool) -> Result<fs::File, ClusterError> {
    let fd = open_dir_nofollow(dir)?;
    check_marked_fd(dir, &fd)?;
    let mut flags =
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::APPEND;
    if truncate {
        flags |= OFlags::TRUNC;
    }
    let f = rustix::fs::openat(&fd, name, flags, Mode::from_raw_mode(crate::cluster::PRIVATE))
        .map_err(|e| ClusterError::Io { path: dir.join(name), err: e.into() })?;
    Ok(fs::File::from(f))
}

/// Remove the cluster directory `path` and everything in it, if it is
/// one of this user's (`check_marked`); anything else is refused
/// untouched. Links inside are removed, never followed.
pub fn remove_cluster_dir(path: &Path) -> Result<(), ClusterError> {
    check_marked(path)?;
    fs::remove_dir_all(path).map_err(|err| ClusterError::Io { path: path.to_path_buf(), err })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_component_of_letters_digits_dash_underscore_and_dot() {
        for good in ["demo", "c1", "a-b_c.d", ".hidden", "x".repeat(64).as_str(), "..."] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let cases: [(&str, &str); 9] = [
            ("", "the name is empty"),
            (".", "`.` names a directory"),
            ("..", "`..` names a directory"),
            ("x/../../etc", "it holds '/'"),
            ("/p", "it holds '/'"),
            ("a b", "it holds ' '"),
            ("a\nb", "it holds '\\n'"),
            ("a\0b", "it holds '\\0'"),
            ("é", "it holds 'é'"),
        ];
        for (bad, why) in cases {
            let e = check_name(bad).unwrap_err();
            assert!(e.starts_with(why), "{bad:?}: {e}");
            assert!(e.ends_with("give a directory with --dir"), "{e}");
        }
        let e = check_name(&"x".repeat(65)).unwrap_err();
        assert!(e.starts_with("65 bytes long"), "{e}");
    }

    #[test]
    fn a_bad_name_is_refused_naming_it_and_a_path_is_a_directory() {
        let e = ClusterLocation::parse("").unwrap_err().to_string();
        assert!(e.starts_with("cluster name \"\": the name is empty"), "{e}");
        assert_eq!(
            ClusterLocation::parse("/a/b").unwrap(),
            ClusterLocation::Dir(PathBuf::from("/a/b"))
        );
        let rel = ClusterLocation::parse("./x").unwrap();
        assert_eq!(rel.path(), std::env::current_dir().unwrap().join("./x"));
        assert_eq!(rel.cluster_name(), "x");
        assert_eq!(ClusterLocation::parse("c1").unwrap().args(), ["--name", "c1"]);
        assert_eq!(ClusterLocation::parse("/a/c1").unwrap().args(), ["--dir", "/a/c1"]);
        for bad in ["/a/..", "/", "/a/b c"] {
            let e = ClusterLocation::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(bad) && e.contains("name"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_kernels_no_user_is_not_a_uid_a_cluster_may_allow() {
        assert!(check_uid(u32::MAX).unwrap_err().contains("not a user id"));
        assert_eq!(check_uid(65534), Ok(()));
        assert_eq!(check_uid(0), Ok(()));
    }

    fn scratch(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("nic-place-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn only_a_new_directory_or_a_marked_one_of_this_users_is_claimed() {
        use std::os::unix::fs::PermissionsExt;
        let t = scratch("claim");
        let c = t.join("c");
        assert!(claim_dir(&c, false).unwrap(), "made now");
        assert_eq!(fs::metadata(&c).unwrap().permissions().mode() & 0o7777, 0o700);
        assert!(c.join(MARKER_FILE).is_file());
        assert_eq!(check_marked(&c).map_err(|e| e.to_string()), Ok(()));
        assert!(!claim_dir(&c, true).unwrap(), "claimed again");
        assert_eq!(fs::metadata(&c).unwrap().permissions().mode() & 0o7777, 0o711);
        // An existing directory without the marker: refused, untouched.
        let other = t.join("mine");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("notes"), "keep").unwrap();
        fs::set_permissions(&other, fs::Permissions::from_mode(0o755)).unwrap();
        let e = claim_dir(&other, false).unwrap_err().to_string();
        assert!(e.contains("is not a cluster directory (no marker file"), "{e}");
        assert_eq!(fs::metadata(&other).unwrap().permissions().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_to_string(other.join("notes")).unwrap(), "keep");
        // A marker that is a link, or that says something else.
        std::os::unix::fs::symlink("/etc/hostname", other.join(MARKER_FILE)).unwrap();
        let e = check_marked(&other).unwrap_err().to_string();
        assert!(e.contains("its marker is a symbolic link"), "{e}");
        fs::remove_file(other.join(MARKER_FILE)).unwrap();
        fs::write(other.join(MARKER_FILE), "hello").unwrap();
        let e = check_marked(&other).unwrap_err().to_string();
        assert!(e.contains("its marker does not say it is one"), "{e}");
        // A link to a directory: refused, the target untouched.
        let link = t.join("link");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        let e = claim_dir(&link, false).unwrap_err().to_string();
        assert!(e.contains("a symbolic link (to "), "{e}");
        assert_eq!(fs::metadata(&other).unwrap().permissions().mode() & 0o7777, 0o755);
        // A file is not a directory.
        fs::write(t.join("file"), "x").unwrap();
        assert!(claim_dir(&t.join("file"), false).is_err());
        fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn a_directory_of_another_user_is_neither_claimed_nor_a_parent() {
        if euid() != 0 {
            // chown needs root; as another user the rule is checked by
            // the ownership of root's directories.
            let e = prepare_parent(Path::new("/root/x/c"), false);
            assert!(e.is_err());
            return;
        }
        let t = scratch("owner");
        let theirs = t.join("theirs");
        fs::create_dir(&theirs).unwrap();
        fs::write(theirs.join(MARKER_FILE), MARKER_TEXT).unwrap();
        rustix::fs::chown(&theirs, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
        let e = claim_dir(&theirs, false).unwrap_err().to_string();
        assert!(e.contains("is owned by uid 65534"), "{e}");
        // Nor is a directory made in it.
        let e = claim_dir(&theirs.join("c"), false).unwrap_err().to_string();
        assert!(e.contains("is owned by uid 65534") && e.contains("NIC_CLUSTER_DIR"), "{e}");
        assert!(!theirs.join("c").exists());
        fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn the_base_is_made_private_or_sticky_and_a_link_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let t = scratch("base");
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        prepare_base(&t.join("private"), false).unwrap();
        assert_eq!(mode(&t.join("private")), 0o700);
        prepare_base(&t.join("shared"), true).unwrap();
        assert_eq!(mode(&t.join("shared")), 0o1733);
        // A private base the user chose is not opened for a shared
        // cluster's users: refused, as it is.
        let e = prepare_base(&t.join("private"), true).unwrap_err().to_string();
        assert!(e.contains("is mode 0700: the users a cluster allows could not pass"), "{e}");
        assert_eq!(mode(&t.join("private")), 0o700);
        let decoy = t.join("decoy");
        fs::create_dir(&decoy).unwrap();
        fs::set_permissions(&decoy, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&decoy, t.join("link")).unwrap();
        let e = prepare_base(&t.join("link"), true).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link (to ") && e.contains("owned by uid"), "{e}");
        assert_eq!(mode(&decoy), 0o755, "the link's target untouched");
        fs::remove_dir_all(&t).unwrap();
    }
}
