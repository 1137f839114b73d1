//! A batch copies the object it starts from once and measures its size once, whatever its
//! edits (R52, R39, R40).

use super::*;

/// An object that counts how often it was copied (its part: a number).
#[derive(Default)]
struct Copied {
    part: u32,
    copies: Arc<std::sync::atomic::AtomicUsize>,
}

impl Clone for Copied {
    fn clone(&self) -> Self {
        self.copies
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Copied {
            part: self.part,
            copies: Arc::clone(&self.copies),
        }
    }
}

/// A target of [`Copied`] objects that refuses a part over 3; it never reads nor writes.
struct UpToThree;

impl Target for UpToThree {
    type Object = Copied;
    type Part = u32;
    const WRITTEN: &'static str = "copied written";

    async fn read(&self) -> Result<Copied, ApiError> {
        Ok(Copied::default())
    }

    fn part(object: &Copied) -> &u32 {
        &object.part
    }

    fn set(object: &mut Copied, part: u32) -> u32 {
        std::mem::replace(&mut object.part, part)
    }

    async fn write(&self, object: &Copied, _: &u32) -> kube::Result<Copied> {
        Ok(object.clone())
    }

    fn check(&self, _: &u32, after: &Copied) -> Result<(), ApiError> {
        match after.part {
            0..=3 => Ok(()),
            _ => Err(ApiError::forbidden("over 3")),
        }
    }

    fn describe(&self) -> String {
        "copied".into()
    }

    fn key(&self) -> String {
        "copied".into()
    }

    fn owner(&self) -> (&str, &str) {
        ("ns", "copied")
    }
}

#[test]
fn a_batch_copies_its_object_once_whatever_its_edits() {
    // R52, R39: a batch of many edits (hundreds of enrollments of one registry while a fleet
    // powers up) copies the object it starts from once, not once per edit; an edit its check
    // refuses is undone (its part swapped back), and the edits after it see the part before it.
    let current = Copied::default();
    let changes: Vec<Change<UpToThree>> = (0..6)
        .map(|i| -> Change<UpToThree> {
            match i {
                3 => Box::new(|o: &Copied| Ok(o.part + 10)),
                _ => Box::new(|o: &Copied| Ok(o.part + 1)),
            }
        })
        .collect();
    let (mut batch, _answers): (Vec<_>, Vec<_>) = changes
        .into_iter()
        .map(|c| pending(c, overdue::claim()))
        .unzip();
    let check = |before: &u32, after: &Copied| UpToThree.check(before, after);
    let (part, results) = apply::<UpToThree>(check, |_, _| Ok(()), &current, &mut batch);
    let refused: Vec<bool> = results.iter().map(Result::is_err).collect();
    assert_eq!(refused, [false, false, false, true, true, true]);
    assert_eq!(part, 3, "the refused edits were undone");
    let copies = current.copies.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        copies, 1,
        "the object was copied {copies} times for one batch"
    );
}

/// Each call of a size check that fits when the part is at most `max`, counted in `calls`.
fn measured(
    calls: &std::cell::Cell<usize>,
    max: u32,
) -> impl Fn(&u32, &Copied) -> Result<(), ApiError> + '_ {
    move |_, after| {
        calls.set(calls.get() + 1);
        match after.part <= max {
            true => Ok(()),
            false => Err(ApiError::too_large("over the size")),
        }
    }
}

#[test]
fn a_batch_measures_its_size_once_unless_the_sum_does_not_fit() {
    // R52, R40: a batch of many heartbeats measures the list once, of their sum (a thousand
    // refreshes measured a list of hundreds a thousand times while the polls behind waited);
    // when the sum does not fit, each edit is measured and the one that crosses is refused.
    let current = Copied::default();
    let plus_one = || -> Change<UpToThree> { Box::new(|o: &Copied| Ok(o.part + 1)) };
    let batch_of = |n| -> (Vec<_>, Vec<_>) {
        (0..n)
            .map(|_| pending(plus_one(), overdue::claim()))
            .unzip()
    };
    let no_check = |_: &u32, _: &Copied| Ok(());
    let calls = std::cell::Cell::new(0);
    let (mut batch, _answers) = batch_of(3);
    let (part, results) = apply::<UpToThree>(no_check, measured(&calls, 3), &current, &mut batch);
    assert_eq!((part, calls.get()), (3, 1), "the sum fits: measured once");
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    calls.set(0);
    let (mut batch, _answers) = batch_of(3);
    let (part, results) = apply::<UpToThree>(no_check, measured(&calls, 2), &current, &mut batch);
    let refused: Vec<bool> = results.iter().map(Result::is_err).collect();
    assert_eq!(refused, [false, false, true]);
    assert_eq!((part, calls.get()), (2, 4), "the sum, then each edit");
}
