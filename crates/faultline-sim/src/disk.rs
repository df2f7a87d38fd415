//! Durable storage: each server's named byte strings, kept by the harness so that they outlive
//! the server's crashes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::api::Storage;

/// One server's disk. The harness holds it for the whole run; each incarnation of the server
/// gets a [`SimStorage`] over it.
#[derive(Debug, Default)]
pub(crate) struct Disk {
    files: BTreeMap<String, Vec<u8>>,
    bytes: u64,
    peak: u64,
}

impl Disk {
    /// The most bytes (names and contents) the disk held at once.
    pub(crate) fn peak_bytes(&self) -> u64 {
        self.peak
    }
}

fn size(name: &str, data: &[u8]) -> u64 {
    (name.len() + data.len()) as u64
}

/// The [`Storage`] the simulator gives a server.
#[derive(Debug, Clone)]
pub struct SimStorage {
    disk: Rc<RefCell<Disk>>,
}

impl SimStorage {
    pub(crate) fn new(disk: Rc<RefCell<Disk>>) -> Self {
        SimStorage { disk }
    }
}

impl Storage for SimStorage {
    fn read(&self, name: &str) -> Option<Vec<u8>> {
        self.disk.borrow().files.get(name).cloned()
    }

    fn write(&self, name: &str, data: &[u8]) {
        let mut disk = self.disk.borrow_mut();
        let added = size(name, data);
        let removed = disk.files.get(name).map_or(0, |old| size(name, old));
        disk.files.insert(name.to_string(), data.to_vec());
        disk.bytes = disk.bytes + added - removed;
        disk.peak = disk.peak.max(disk.bytes);
    }

    fn remove(&self, name: &str) {
        let mut disk = self.disk.borrow_mut();
        if let Some(old) = disk.files.remove(name) {
            disk.bytes -= size(name, &old);
        }
    }

    fn names(&self) -> Vec<String> {
        self.disk.borrow().files.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_writes_and_removals_and_the_peak_stays() {
        let disk = Rc::new(RefCell::new(Disk::default()));
        let s = SimStorage::new(disk.clone());
        s.write("a", b"12345");
        s.write("bb", b"1");
        assert_eq!(disk.borrow().bytes, 6 + 3);
        s.write("a", b"1");
        assert_eq!(disk.borrow().bytes, 2 + 3);
        s.remove("bb");
        s.remove("missing");
        assert_eq!(disk.borrow().bytes, 2);
        assert_eq!(disk.borrow().peak_bytes(), 9);
        assert_eq!(s.read("a").as_deref(), Some(&b"1"[..]));
        assert_eq!(s.names(), vec!["a".to_string()]);
        let again = SimStorage::new(disk);
        assert_eq!(again.read("a").as_deref(), Some(&b"1"[..]));
    }
}
