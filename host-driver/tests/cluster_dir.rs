//! The cluster directory contract: create, open, find by name, replace a
//! stale cluster, refuse a live one, probe port locks, remove.

mod live_rig;

use std::fs;

use host_driver::cluster::{
    self, port_slice, ClusterBackend, ClusterDir, ClusterError, ClusterManifest, MANIFEST_FILE,
};
use host_driver::nic_abi::{map, NUM_PORTS, PAGE_SIZE};
use live_rig::temp_path;

fn manifest(name: &str) -> ClusterManifest {
    ClusterManifest::new(name, ClusterBackend::Qemu, 3, "lanai9", map::SRAM_MIN as u64, 8 << 20)
}

#[test]
fn create_then_open_round_trips_the_manifest_and_sizes_every_file() {
    let path = temp_path("roundtrip");
    let m = manifest("roundtrip");
    let made = ClusterDir::create(&path, &m).unwrap();
    let dir = ClusterDir::open(path.to_str().unwrap()).unwrap();
    assert_eq!(dir.manifest(), &m);
    assert_eq!(dir.manifest(), made.manifest());
    assert_eq!(dir.manifest().pid, std::process::id());
    assert!(dir.device_alive());
    for node in 0..3 {
        assert_eq!(fs::metadata(dir.sram_path(node)).unwrap().len(), map::SRAM_MIN as u64);
        assert_eq!(fs::metadata(dir.host_path(node)).unwrap().len(), 8 << 20);
        for p in 0..NUM_PORTS as u8 {
            assert!(dir.port_lock_path(node, p).exists());
        }
        assert!(!dir.flash_path(node).exists(), "flash is written by `xtask flash`");
    }
    assert_eq!(dir.sram_path(2), path.join("node2").join("sram"));
    assert_eq!(dir.port_lock_path(1, 7), path.join("node1").join("port7.lock"));
    // The manifest is plain TOML a person (or QEMU's launcher) can read.
    let text = fs::read_to_string(path.join(MANIFEST_FILE)).unwrap();
    assert!(text.contains("backend = \"qemu\""), "{text}");
    assert!(text.contains("nodes = 3"), "{text}");
    assert!(matches!(dir.check_node(3), Err(ClusterError::NoSuchNode { node: 3, nodes: 3 })));
    dir.remove().unwrap();
    assert!(!path.exists());
}

#[test]
fn fresh_node_files_read_as_zero() {
    let path = temp_path("zero");
    let dir = ClusterDir::create(&path, &manifest("zero")).unwrap();
    let bytes = fs::read(dir.host_path(0)).unwrap();
    assert!(bytes.iter().all(|&b| b == 0));
    dir.remove().unwrap();
}

#[test]
fn host_memory_splits_into_equal_page_aligned_port_slices() {
    let path = temp_path("slices");
    let dir = ClusterDir::create(&path, &manifest("slices")).unwrap();
    let mut end = 0;
    for p in 0..NUM_PORTS as u8 {
        let (start, len) = dir.port_slice(p);
        assert_eq!(start, end, "slices are contiguous");
        // An eighth of the memory, less the page tables' share (1/512).
        assert_eq!(len, 254 * PAGE_SIZE);
        assert_eq!(start % PAGE_SIZE, 0);
        end = start + len;
    }
    // The page tables follow, one per port, within the memory.
    let layout = dir.host_layout();
    assert_eq!(layout.tables, end);
    assert!(layout.end() <= 8 << 20);
    assert!(layout.table_bytes >= 254 * 8);
    assert_eq!(port_slice(8 << 20, 3), dir.port_slice(3));
    dir.remove().unwrap();
}

#[test]
fn open_says_what_is_wrong() {
    let path = temp_path("errors");
    assert!(matches!(ClusterDir::open_path(&path), Err(ClusterError::NotFound { .. })));
    fs::create_dir_all(&path).unwrap();
    fs::write(path.join(MANIFEST_FILE), "this is = not [toml").unwrap();
    let e = ClusterDir::open_path(&path).unwrap_err();
    assert!(matches!(e, ClusterError::BadManifest { .. }), "{e}");
    let mut m = manifest("errors");
    m.host_size = 12345;
    fs::write(path.join(MANIFEST_FILE), toml::to_string(&m).unwrap()).unwrap();
    let e = ClusterDir::open_path(&path).unwrap_err();
    assert!(e.to_string().contains("host_size"), "{e}");
    fs::remove_dir_all(&path).unwrap();
}

#[test]
fn create_refuses_bad_manifests_and_clusters_whose_device_lives() {
    let path = temp_path("live-owner");
    let mut m = manifest("live-owner");
    m.nodes = 0;
    assert!(matches!(ClusterDir::create(&path, &m), Err(ClusterError::BadManifest { .. })));
    // A cluster owned by another live process (pid 1 always runs).
    let mut m = manifest("live-owner");
    m.set_device(1);
    ClusterDir::create(&path, &m).unwrap();
    let e = ClusterDir::create(&path, &manifest("live-owner")).unwrap_err();
    assert!(matches!(e, ClusterError::Exists { pid: 1, .. }), "{e}");
    fs::remove_dir_all(&path).unwrap();
}

#[test]
fn create_replaces_a_stale_cluster_with_fresh_zeroed_files() {
    let path = temp_path("stale");
    let mut m = manifest("stale");
    m.pid = u32::MAX - 1; // no such process
    let old = ClusterDir::create(&path, &m).unwrap();
    assert!(!old.device_alive());
    fs::write(old.host_path(0), vec![0xEEu8; 8 << 20]).unwrap();
    let new = ClusterDir::create(&path, &manifest("stale")).unwrap();
    assert!(new.device_alive());
    let bytes = fs::read(new.host_path(0)).unwrap();
    assert!(bytes.iter().all(|&b| b == 0), "the old host memory is gone");
    new.remove().unwrap();
}

#[test]
fn unpublished_clusters_cannot_be_found_until_published() {
    let path = temp_path("publish");
    let mut dir = ClusterDir::create_unpublished(&path, &manifest("publish")).unwrap();
    assert!(dir.sram_path(0).exists());
    assert!(matches!(ClusterDir::open_path(&path), Err(ClusterError::NotFound { .. })));
    dir.publish().unwrap();
    assert!(ClusterDir::open_path(&path).is_ok());
    dir.update(|m| m.pid = 4242).unwrap();
    assert_eq!(ClusterDir::open_path(&path).unwrap().manifest().pid, 4242);
    dir.remove().unwrap();
}

#[test]
fn clusters_are_found_by_name_under_the_base_dir() {
    // The only test in this binary that reads NIC_CLUSTER_DIR.
    let base = temp_path("base");
    std::env::set_var(cluster::CLUSTER_DIR_ENV, &base);
    assert_eq!(cluster::base_dir(), base);
    assert_eq!(cluster::resolve("demo"), base.join("demo"));
    let dir = ClusterDir::create(&base.join("demo"), &manifest("demo")).unwrap();
    let found = ClusterDir::open("demo").unwrap();
    assert_eq!(found.path(), dir.path());
    let names: Vec<String> = ClusterDir::list().iter().map(|d| d.manifest().name.clone()).collect();
    assert_eq!(names, ["demo"]);
    std::env::remove_var(cluster::CLUSTER_DIR_ENV);
    fs::remove_dir_all(&base).unwrap();
}

#[test]
fn port_held_sees_a_lock_taken_by_another_open_file() {
    let path = temp_path("held");
    let dir = ClusterDir::create(&path, &manifest("held")).unwrap();
    assert!(!dir.port_held(0, 2).unwrap());
    let f = fs::OpenOptions::new().read(true).write(true).open(dir.port_lock_path(0, 2)).unwrap();
    f.lock().unwrap();
    assert!(dir.port_held(0, 2).unwrap());
    assert!(!dir.port_held(0, 3).unwrap());
    drop(f);
    assert!(!dir.port_held(0, 2).unwrap());
    dir.remove().unwrap();
}

#[test]
fn a_stale_clusters_lock_holders_do_not_block_the_new_cluster() {
    let path = temp_path("stale-lock");
    let mut m = manifest("stale-lock");
    m.pid = u32::MAX - 1;
    let old = ClusterDir::create(&path, &m).unwrap();
    let f = fs::OpenOptions::new().read(true).write(true).open(old.port_lock_path(0, 1)).unwrap();
    f.lock().unwrap();
    let new = ClusterDir::create(&path, &manifest("stale-lock")).unwrap();
    assert!(!new.port_held(0, 1).unwrap());
    drop(f);
    new.remove().unwrap();
}
