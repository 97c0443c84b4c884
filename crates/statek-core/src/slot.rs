//! The outcome class of every slot of a reserved range ([`SlotClass`]),
//! as runs of equal classes ([`SlotOutcomes`]): what a slot that claimed
//! nothing found, which a source records once per range (statek-store-pg:
//! `statek.slot_outcomes`, migration V14) for an audit to count, and the
//! source's answer to such a record ([`SlotOutcomeAnswer`]).

/// What one slot ended with, as recorded (one letter each in
/// `statek.slot_outcomes.classes`). Every slot is consumed, whatever its
/// class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SlotClass {
    /// `c`: a run was claimed for the slot (whatever became of the run).
    Claimed,
    /// `i`: the claim asked the database; the tenant had no claimable run.
    Idle,
    /// `k`: the Worker knew the tenant had no claimable run and did not
    /// ask (its idle set).
    IdleKnown,
    /// `n`: the tenant had claimable runs, all held by other claimers.
    Contended,
    /// `l`: the tenant's concurrency cap or rate limit let it start none.
    Limited,
    /// `d`: cost mode; the tenant had a claimable run but was in debt
    /// after the slot's credit (docs/guarantees.md, "Cost mode: the
    /// bound"). Precedence: a slot of a tenant without a claimable run is
    /// idle, whatever its balance; a debt slot is never contended or
    /// limited (its claim is not tried).
    Debt,
    /// `x`: the Worker stopped, or its claim failed for good, before it
    /// decided the slot; the slot is consumed unused.
    Unused,
}

impl SlotClass {
    /// Every class, in declaration order.
    pub const ALL: [SlotClass; 7] = [
        SlotClass::Claimed,
        SlotClass::Idle,
        SlotClass::IdleKnown,
        SlotClass::Contended,
        SlotClass::Limited,
        SlotClass::Debt,
        SlotClass::Unused,
    ];

    /// The class's letter in the database.
    pub const fn letter(self) -> char {
        match self {
            SlotClass::Claimed => 'c',
            SlotClass::Idle => 'i',
            SlotClass::IdleKnown => 'k',
            SlotClass::Contended => 'n',
            SlotClass::Limited => 'l',
            SlotClass::Debt => 'd',
            SlotClass::Unused => 'x',
        }
    }

    /// The class of a letter, `None` for any other character.
    pub fn from_letter(letter: char) -> Option<Self> {
        Self::ALL.into_iter().find(|class| class.letter() == letter)
    }

    /// A lowercase label: `claimed`, `idle`, `idle_known`, `contended`,
    /// `limited`, `debt`, `unused`.
    pub const fn label(self) -> &'static str {
        match self {
            SlotClass::Claimed => "claimed",
            SlotClass::Idle => "idle",
            SlotClass::IdleKnown => "idle_known",
            SlotClass::Contended => "contended",
            SlotClass::Limited => "limited",
            SlotClass::Debt => "debt",
            SlotClass::Unused => "unused",
        }
    }
}

/// The classes of a range's slots in sequence order, as runs of equal
/// classes: `[(Claimed, 3), (IdleKnown, 500)]` is three claimed slots,
/// then 500 idle ones. Adjacent runs always differ.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotOutcomes {
    runs: Vec<(SlotClass, u32)>,
}

impl SlotOutcomes {
    /// No slots yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `count` slots of `class` (nothing for 0), merged with the
    /// last run when it has the same class.
    pub fn push(&mut self, class: SlotClass, count: u32) {
        if count == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some((last, n)) if *last == class => *n = n.saturating_add(count),
            _ => self.runs.push((class, count)),
        }
    }

    /// The runs, in sequence order.
    pub fn runs(&self) -> &[(SlotClass, u32)] {
        &self.runs
    }

    /// The number of slots.
    pub fn slot_count(&self) -> u64 {
        self.runs.iter().map(|(_, n)| u64::from(*n)).sum()
    }

    /// Slots per class, in [`SlotClass::ALL`] order.
    pub fn totals(&self) -> [u64; 7] {
        let mut totals = [0u64; 7];
        for (class, n) in &self.runs {
            if let Some(index) = SlotClass::ALL.iter().position(|c| c == class) {
                totals[index] += u64::from(*n);
            }
        }
        totals
    }

    /// The class of the slot at `offset` from the range's first sequence.
    pub fn class_at(&self, offset: u64) -> Option<SlotClass> {
        let mut start = 0u64;
        for (class, n) in &self.runs {
            let end = start + u64::from(*n);
            if offset < end {
                return Some(*class);
            }
            start = end;
        }
        None
    }
}

/// The runs as `letter` + count, space-separated: `c3 k500`.
impl std::fmt::Display for SlotOutcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, (class, count)) in self.runs.iter().enumerate() {
            if index > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}{count}", class.letter())?;
        }
        Ok(())
    }
}

impl FromIterator<SlotClass> for SlotOutcomes {
    fn from_iter<I: IntoIterator<Item = SlotClass>>(iter: I) -> Self {
        let mut outcomes = Self::new();
        for class in iter {
            outcomes.push(class, 1);
        }
        outcomes
    }
}

/// How recording a range's outcomes ended (statek-store-pg:
/// `PgStore::record_slot_outcomes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOutcomesRecorded {
    /// The record was written.
    Recorded,
    /// The same record was already there (a replay after a lost
    /// acknowledgement); nothing changed.
    Replayed,
}

/// The source's answer to one record of a batch of records
/// (statek-store-pg: `PgStore::record_slot_outcome_ranges`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOutcomeAnswer {
    /// Written, or already there ([`SlotOutcomesRecorded`]).
    Accepted(SlotOutcomesRecorded),
    /// Refused, nothing of it written: the database's reason (no retained
    /// range starts there, the lengths differ, a claimed slot named
    /// otherwise, another record for the range, malformed classes).
    Refused(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_and_labels_are_one_per_class() {
        let letters: String = SlotClass::ALL.iter().map(|c| c.letter()).collect();
        assert_eq!(letters, "ciknldx");
        for class in SlotClass::ALL {
            assert_eq!(SlotClass::from_letter(class.letter()), Some(class));
        }
        assert_eq!(SlotClass::from_letter('z'), None);
        let labels: Vec<&str> = SlotClass::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(
            labels,
            [
                "claimed",
                "idle",
                "idle_known",
                "contended",
                "limited",
                "debt",
                "unused"
            ]
        );
    }

    #[test]
    fn runs_merge_equal_neighbours_and_skip_empty_pushes() {
        let mut outcomes: SlotOutcomes = [
            SlotClass::Claimed,
            SlotClass::Claimed,
            SlotClass::IdleKnown,
            SlotClass::Claimed,
        ]
        .into_iter()
        .collect();
        outcomes.push(SlotClass::Claimed, 0);
        outcomes.push(SlotClass::Claimed, 4);
        outcomes.push(SlotClass::Unused, 2);
        assert_eq!(
            outcomes.runs(),
            [
                (SlotClass::Claimed, 2),
                (SlotClass::IdleKnown, 1),
                (SlotClass::Claimed, 5),
                (SlotClass::Unused, 2)
            ]
        );
        assert_eq!(outcomes.slot_count(), 10);
        assert_eq!(outcomes.totals(), [7, 0, 1, 0, 0, 0, 2]);
        assert_eq!(outcomes.class_at(2), Some(SlotClass::IdleKnown));
        assert_eq!(outcomes.class_at(7), Some(SlotClass::Claimed));
        assert_eq!(outcomes.class_at(9), Some(SlotClass::Unused));
        assert_eq!(outcomes.class_at(10), None);
        assert_eq!(outcomes.to_string(), "c2 k1 c5 x2");
        assert_eq!(SlotOutcomes::new().to_string(), "");
    }
}
