//! A player side for tests of the gateway driver alone: it admits every
//! login at once, records each binding, and takes no requests.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use routerd::gateway::{GatewayHandle, Ingress, LoginOutcome, LoginRequest, ServicesSide};
use wire::frame::FrameBuf;

/// The bindings a `RecordingPort` admitted: (session, epoch, player).
pub type Bindings = Rc<RefCell<Vec<(u64, u32, u64)>>>;

/// Admits every login at once and records its binding in `bound`.
pub struct RecordingPort {
    bound: Bindings,
    gateway: RefCell<Option<GatewayHandle>>,
}

impl RecordingPort {
    /// The player side of `gateway`, recording into `bound`.
    pub fn plugged(gateway: &GatewayHandle, bound: &Bindings) -> RecordingPort {
        RecordingPort {
            bound: bound.clone(),
            gateway: RefCell::new(Some(gateway.clone())),
        }
    }
}

impl ServicesSide for RecordingPort {
    fn login(&self, login: LoginRequest, _now: Instant) -> Result<(), LoginRequest> {
        self.bound
            .borrow_mut()
            .push((login.session_id, login.bound_epoch, login.player_id));
        let gateway = self.gateway.borrow().clone().expect("plugged in");
        let admitted = LoginOutcome::Admitted {
            player_id: login.player_id,
            session_epoch: login.bound_epoch,
        };
        gateway.complete_login(login.session_id, login.seq, admitted);
        Ok(())
    }

    fn deliver(&self, _frame: FrameBuf) -> Result<(), FrameBuf> {
        Ok(())
    }

    fn deliver_ingress<'a>(
        &self,
        _gateway_node: u64,
        ingress: Ingress<'a>,
        _now: Instant,
    ) -> Result<(), Ingress<'a>> {
        Err(ingress)
    }
}
