//! Which process a pid is: a pid alone names whatever process the kernel
//! last gave it to, so the manifest records beside the device process's
//! pid its start time (`/proc/<pid>/stat` field 22, clock ticks since
//! boot) and its executable; a pid whose process started at another time,
//! or runs another program, is not the device process, whatever the
//! manifest says. Tools check this before any signal
//! (`ClusterDir::signal_device`), and liveness checks ask it too
//! (`ClusterDir::device_alive`).

use std::fs;
use std::path::PathBuf;

/// The start time of process `pid` (clock ticks since boot), if it lives
/// and is not a zombie (killed, not yet reaped: dead).
pub fn process_start(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything:
    // the fields after the last `)` are fields 3, 4, ...
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    // Field 22 is the 20th after the parenthesis (field 3 the first).
    fields.nth(18)?.parse().ok()
}

/// The executable process `pid` runs, if it can be read (another user's
/// process may not be readable): the path `/proc/<pid>/exe` links to,
/// without the ` (deleted)` the kernel adds once the file was replaced
/// (a rebuilt binary).
pub fn process_exe(pid: u32) -> Option<PathBuf> {
    let p = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let s = p.to_string_lossy();
    Some(match s.strip_suffix(" (deleted)") {
        Some(t) => PathBuf::from(t),
        None => p,
    })
}

/// What a manifest's pid is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceState {
    /// The process that started the cluster runs under that pid.
    Alive,
    /// No process has that pid (or only a zombie).
    Gone,
    /// A process has that pid but it is not the device process: said why
    /// (the pid was reused, or the manifest edited).
    Other(String),
    /// The manifest records no start time (an older one): the pid lives,
    /// and whose it is cannot be told.
    Unverified,
}

/// What pid `pid`, recorded with start time `start` and executable `exe`
/// (None: not recorded), is now.
pub fn device_state(pid: u32, start: Option<u64>, exe: Option<&str>) -> DeviceState {
    let Some(now) = process_start(pid) else { return DeviceState::Gone };
    let Some(start) = start else { return DeviceState::Unverified };
    if now != start {
        return DeviceState::Other(format!(
            "process {pid} started at tick {now} since boot, the device process at tick {start}"
        ));
    }
    if let (Some(exe), Some(runs)) = (exe, process_exe(pid)) {
        if runs.as_os_str() != exe {
            return DeviceState::Other(format!(
                "process {pid} runs {}, the device process ran {exe}",
                runs.display()
            ));
        }
    }
    DeviceState::Alive
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_pid_is_the_device_only_with_its_start_time_and_program() {
        let me = std::process::id();
        let start = process_start(me).expect("this process's start time");
        let exe = process_exe(me).expect("this process's executable");
        let exe = exe.to_str().unwrap();
        assert_eq!(device_state(me, Some(start), Some(exe)), DeviceState::Alive);
        assert_eq!(device_state(me, Some(start), None), DeviceState::Alive);
        let DeviceState::Other(why) = device_state(me, Some(start + 1), Some(exe)) else {
            panic!("another start time is another process")
        };
        assert!(why.contains(&format!("at tick {}", start + 1)), "{why}");
        let DeviceState::Other(why) = device_state(me, Some(start), Some("/bin/sleep")) else {
            panic!("another program is another process")
        };
        assert!(why.ends_with("the device process ran /bin/sleep"), "{why}");
        assert_eq!(device_state(me, None, None), DeviceState::Unverified);
        assert_eq!(device_state(u32::MAX - 1, Some(start), None), DeviceState::Gone);
        assert_eq!(device_state(0, Some(start), None), DeviceState::Gone);
    }

    #[test]
    fn a_reaped_or_zombie_child_is_gone() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited, not reaped: a zombie.
        let t = std::time::Instant::now();
        while fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z'))
        {
            assert!(t.elapsed().as_secs() < 5, "`true` did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(process_start(pid), None);
        child.wait().unwrap();
        assert_eq!(process_start(pid), None);
    }

    #[test]
    fn a_command_name_with_parentheses_and_spaces_does_not_shift_the_fields() {
        let dir = std::env::temp_dir().join(format!("nic-ident-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let odd = dir.join("a) b (c");
        std::os::unix::fs::symlink("/bin/sleep", &odd).unwrap();
        let mut child = Command::new(&odd).arg("5").spawn().unwrap();
        let start = process_start(child.id());
        let mine = process_start(std::process::id()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let start = start.expect("the child's start time");
        assert!(start >= mine, "child {start}, parent {mine}");
    }
}
