//! Per-thread visited set. Clearing an n-sized array before every search would cost more than
//! the search itself, so each search bumps a generation number and a slot counts as visited
//! only when its mark equals the current generation. The array lives in a thread-local, shared
//! by every index the thread searches, and is zeroed only when the 16-bit counter wraps.

use std::cell::RefCell;

pub struct Visited {
    marks: Vec<u16>,
    generation: u16,
}

impl Visited {
    const fn new() -> Self {
        Visited {
            marks: Vec::new(),
            generation: 0,
        }
    }

    /// Start a new search over `slots` nodes: nothing is visited afterwards.
    fn reset(&mut self, slots: usize) {
        if self.marks.len() < slots {
            self.marks.resize(slots, 0);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Marks are always <= the generation that wrote them, so a full clear on wrap
            // guarantees a stale mark never equals a live generation.
            self.marks.fill(0);
            self.generation = 1;
        }
    }

    /// Mark `slot`; true when it was not visited before in this search.
    #[inline]
    pub fn first_visit(&mut self, slot: u32) -> bool {
        let mark = &mut self.marks[slot as usize];
        if *mark == self.generation {
            false
        } else {
            *mark = self.generation;
            true
        }
    }
}

thread_local! {
    static VISITED: RefCell<Visited> = const { RefCell::new(Visited::new()) };
}

/// Run `f` with this thread's visited set, reset for `slots` nodes. Not re-entrant: searches
/// never nest, they run one after another.
pub fn with_visited<R>(slots: usize, f: impl FnOnce(&mut Visited) -> R) -> R {
    VISITED.with(|cell| {
        let mut visited = cell.borrow_mut();
        visited.reset(slots);
        f(&mut visited)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_search_starts_empty() {
        with_visited(4, |v| {
            assert!(v.first_visit(3));
            assert!(!v.first_visit(3));
        });
        with_visited(4, |v| assert!(v.first_visit(3)));
    }

    #[test]
    fn survives_generation_wrap() {
        let mut v = Visited::new();
        v.reset(2);
        v.first_visit(0);
        for _ in 0..70_000 {
            v.reset(2);
            assert!(v.first_visit(1));
        }
        assert!(v.first_visit(0));
    }
}
