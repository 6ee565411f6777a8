//! Records every accepted write: an object type wrapped so that each
//! handler run that mutated its object leaves its key in the node's log,
//! which the simulator checks after the router call (`safety.rs`).

use std::cell::RefCell;
use std::rc::Rc;

use wire::ObjectKey;

use crate::config::Persist;
use crate::router::handler::{DecodeError, HandlerOutput, ObjectState, ObjectType};
use crate::router::Request;

/// Keys of the mutating handler runs since the log was last read.
pub(super) type WriteLog = Rc<RefCell<Vec<ObjectKey>>>;

pub(super) struct Recorded {
    inner: Box<dyn ObjectType>,
    log: WriteLog,
}

impl Recorded {
    pub fn wrap(inner: Box<dyn ObjectType>, log: &WriteLog) -> Box<dyn ObjectType> {
        Box::new(Recorded {
            inner,
            log: log.clone(),
        })
    }
}

impl ObjectType for Recorded {
    fn type_id(&self) -> u32 {
        self.inner.type_id()
    }

    fn auto_create(&self) -> bool {
        self.inner.auto_create()
    }

    fn may_create(&self, op: u32) -> Result<(), crate::router::types::Outcome> {
        self.inner.may_create(op)
    }

    fn persist(&self) -> Persist {
        self.inner.persist()
    }

    fn decode(
        &self,
        key: ObjectKey,
        state: Option<&[u8]>,
    ) -> Result<Box<dyn ObjectState>, DecodeError> {
        let inner = self.inner.decode(key, state)?;
        Ok(Box::new(RecordedState {
            inner,
            log: self.log.clone(),
        }))
    }
}

struct RecordedState {
    inner: Box<dyn ObjectState>,
    log: WriteLog,
}

impl ObjectState for RecordedState {
    fn encode(&self) -> Vec<u8> {
        self.inner.encode()
    }

    fn handle(&mut self, key: ObjectKey, request: &Request, out: &mut HandlerOutput) {
        self.inner.handle(key, request, out);
        if out.mutated {
            self.log.borrow_mut().push(key);
        }
    }
}
