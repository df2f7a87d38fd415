//! The replicated log after the last snapshot, indexed from 1 like the paper's.

use crate::msg::Entry;

/// Entries after `base`; the entry at `base` (term `base_term`) is the last one the snapshot
/// includes.
#[derive(Debug, Clone, Default)]
pub struct Log {
    base: u64,
    base_term: u64,
    entries: Vec<Entry>,
}

impl Log {
    /// A log that starts after a snapshot through `base` (0 and 0 for none).
    pub fn new(base: u64, base_term: u64, entries: Vec<Entry>) -> Self {
        Log {
            base,
            base_term,
            entries,
        }
    }

    /// The last index the snapshot includes.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The term of the entry at [`Log::base`].
    pub fn base_term(&self) -> u64 {
        self.base_term
    }

    /// The index of the last entry (the base when there is none after it).
    pub fn last_index(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    /// The term of the last entry.
    pub fn last_term(&self) -> u64 {
        self.entries.last().map_or(self.base_term, |e| e.term)
    }

    /// The term of the entry at `index`, if this log still knows it.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        if index == self.base {
            Some(self.base_term)
        } else {
            self.entry(index).map(|e| e.term)
        }
    }

    /// The entry at `index`, if it is after the base and in the log.
    pub fn entry(&self, index: u64) -> Option<&Entry> {
        let offset = index.checked_sub(self.base + 1)?;
        self.entries.get(usize::try_from(offset).ok()?)
    }

    /// Appends one entry; returns its index.
    pub fn push(&mut self, entry: Entry) -> u64 {
        self.entries.push(entry);
        self.last_index()
    }

    /// Removes the entries from `index` on.
    pub fn truncate_from(&mut self, index: u64) {
        let keep = index.saturating_sub(self.base + 1);
        self.entries
            .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
    }

    /// Up to `max` entries from `index` on.
    pub fn entries_from(&self, index: u64, max: usize) -> Vec<Entry> {
        let start = usize::try_from(index.saturating_sub(self.base + 1)).unwrap_or(usize::MAX);
        self.entries.iter().skip(start).take(max).cloned().collect()
    }

    /// Drops the entries through `index`, which a snapshot now holds.
    pub fn compact_to(&mut self, index: u64) {
        if index <= self.base {
            return;
        }
        let term = self.term_at(index).unwrap_or(self.base_term);
        let drop = usize::try_from(index - self.base).unwrap_or(usize::MAX);
        self.entries.drain(..drop.min(self.entries.len()));
        self.base = index;
        self.base_term = term;
    }

    /// Replaces the whole log with a snapshot's base.
    pub fn reset_to(&mut self, base: u64, base_term: u64) {
        self.entries.clear();
        self.base = base;
        self.base_term = base_term;
    }

    /// The first index of the run of entries sharing the term of the entry at `index` (not
    /// below the first entry after the base): where a leader should retry after a mismatch.
    pub fn first_of_term_at(&self, index: u64) -> u64 {
        let Some(term) = self.term_at(index) else {
            return index;
        };
        let mut first = index;
        while first > self.base + 1 && self.term_at(first - 1) == Some(term) {
            first -= 1;
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Command;

    fn entry(term: u64) -> Entry {
        Entry {
            term,
            command: Command::Noop,
        }
    }

    #[test]
    fn indices_terms_truncation_and_compaction() {
        let mut log = Log::default();
        for t in [1, 1, 2, 2, 2, 3] {
            log.push(entry(t));
        }
        assert_eq!((log.last_index(), log.last_term()), (6, 3));
        assert_eq!(log.term_at(0), Some(0));
        assert_eq!(log.term_at(4), Some(2));
        assert_eq!(log.term_at(7), None);
        assert_eq!(log.first_of_term_at(5), 3);
        assert_eq!(log.entries_from(5, 10).len(), 2);
        log.compact_to(3);
        assert_eq!((log.base(), log.base_term()), (3, 2));
        assert_eq!(log.term_at(2), None);
        assert_eq!(log.term_at(3), Some(2));
        assert_eq!(log.first_of_term_at(5), 4);
        log.truncate_from(5);
        assert_eq!(log.last_index(), 4);
        assert_eq!(log.entries_from(4, 10), vec![entry(2)]);
        log.reset_to(10, 4);
        assert_eq!((log.last_index(), log.last_term()), (10, 4));
    }
}
