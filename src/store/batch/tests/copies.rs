//! A batch copies the object it starts from once, whatever its edits (R52, R39).

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
    let (part, results) = apply::<UpToThree>(check, &current, &mut batch);
    let refused: Vec<bool> = results.iter().map(Result::is_err).collect();
    assert_eq!(refused, [false, false, false, true, true, true]);
    assert_eq!(part, 3, "the refused edits were undone");
    let copies = current.copies.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        copies, 1,
        "the object was copied {copies} times for one batch"
    );
}
