//! A per-thread bump arena for the container being decoded (eras A and B).
//!
//! Decision: a decoded container's lists (command, env, ports, volume mounts, resource
//! lists...) were each a malloc, freed a moment later by a drop walk over the whole struct;
//! from an arena era A runs faster (BENCHMARKS.md). An allocation is a
//! pointer bump into memory the previous container used, still in cache, and nothing is freed
//! one by one: the container borrows the arena, which is emptied when the borrow ends.

use std::cell::{RefCell, RefMut};

use bumpalo::Bump;

/// An arena grown past this (a huge input) is given back to the system instead of kept for
/// the next container, so what a thread holds stays small between containers.
const KEEP_BYTES: usize = 1 << 20;

thread_local! {
    static ARENA: RefCell<Bump> = RefCell::new(Bump::new());
}

/// Runs `f` with this thread's arena, emptied afterwards (even if `f` panics). A nested call
/// (the arena already lent out on this thread) gets an arena of its own.
pub fn with<R>(f: impl FnOnce(&Bump) -> R) -> R {
    ARENA.with(|cell| match cell.try_borrow_mut() {
        Ok(bump) => f(&EmptyOnDrop(bump).0),
        Err(_) => f(&Bump::new()),
    })
}

/// Empties the lent arena when the loan ends; an arena grown past [`KEEP_BYTES`] is replaced.
struct EmptyOnDrop<'a>(RefMut<'a, Bump>);

impl Drop for EmptyOnDrop<'_> {
    fn drop(&mut self) {
        if self.0.allocated_bytes() > KEEP_BYTES {
            *self.0 = Bump::new();
        } else {
            self.0.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> usize {
        ARENA.with(|cell| cell.borrow().allocated_bytes())
    }

    #[test]
    fn emptied_after_use_and_a_huge_arena_given_back() {
        let small = with(|a| {
            a.alloc_slice_fill_copy(1000, 7u8)
                .iter()
                .map(|&b| usize::from(b))
                .sum::<usize>()
        });
        assert_eq!(small, 7000);
        let kept = held();
        // Reused, not grown: the same 1,000 bytes fit in what the first use left.
        with(|a| a.alloc_slice_fill_copy(1000, 1u8).len());
        assert_eq!(held(), kept);
        with(|a| a.alloc_slice_fill_copy(4 * KEEP_BYTES, 1u8).len());
        assert!(held() <= KEEP_BYTES, "{}", held());
    }

    #[test]
    fn emptied_when_the_user_panics() {
        let panicked = std::panic::catch_unwind(|| {
            with(|a| {
                a.alloc_slice_fill_copy(4 * KEEP_BYTES, 1u8);
                std::panic::resume_unwind(Box::new("a decoder bug"))
            })
        });
        assert!(panicked.is_err());
        assert!(held() <= KEEP_BYTES, "{}", held());
        // And lent out again.
        assert_eq!(with(|a| a.alloc_slice_fill_copy(3, 1u8).len()), 3);
    }

    #[test]
    fn nested_use_gets_its_own_arena() {
        let (outer, inner) = with(|a| {
            let outer = a.alloc_slice_fill_copy(64, 1u8);
            let inner = with(|b| {
                b.alloc_slice_fill_copy(64, 2u8)
                    .iter()
                    .map(|&x| u32::from(x))
                    .sum::<u32>()
            });
            (outer.iter().map(|&x| u32::from(x)).sum::<u32>(), inner)
        });
        assert_eq!((outer, inner), (64, 128));
    }
}
