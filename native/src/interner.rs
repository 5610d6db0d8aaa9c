//! The texts the core holds (cards, nodes, sites, models, tenants, instances), each stored
//! once and referred to by a `u32`: the state and the rows carry ids, not strings.

use crate::hashing::FxMap;

/// The id of no text: no tenant / instance / model.
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Default)]
pub(crate) struct Interner {
    ids: FxMap<Box<str>, u32>,
    texts: Vec<Box<str>>,
}

impl Interner {
    pub(crate) fn id(&mut self, text: &str) -> u32 {
        if let Some(id) = self.ids.get(text) {
            return *id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(text.into());
        self.ids.insert(text.into(), id);
        id
    }

    /// The id of `text` if it is held (nothing is added).
    pub(crate) fn get(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    pub(crate) fn optional(&mut self, text: Option<&str>) -> u32 {
        text.map_or(NONE, |t| self.id(t))
    }

    pub(crate) fn text(&self, id: u32) -> &str {
        if id == NONE {
            ""
        } else {
            &self.texts[id as usize]
        }
    }

    pub(crate) fn nullable(&self, id: u32) -> Option<&str> {
        (id != NONE).then(|| self.text(id))
    }

    /// How many distinct texts are held.
    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }
}
