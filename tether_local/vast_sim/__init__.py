"""An in-memory Vast.ai API that speaks the real HTTP shapes, irregularities included.

`VastSimulator.handle(request) -> response` is an httpx handler: tests plug it into
`httpx.MockTransport(sim.handle)`, the local stack serves it over loopback HTTP (and the official
`vastai` client runs against it there, tests/integration/vast/). It keeps
- an offer book (`offers`); a rented offer leaves the book until its instance is
  destroyed or stopped (a stopped instance frees its GPUs), so renting it again answers 404
  `no_such_ask` like Vast; search filters take numbers as text (`{"eq": "1"}`), as the official
  client sends them;
- instances whose `actual_status` moves created → loading → running on an injectable clock,
  stopped on request, and exited/offline on `kill()` (which, as on Vast, never heals by itself);
  a start fails with `resources_unavailable` when the machine was rented meanwhile; a missing
  instance is 200 `{"instances": null}`, as on Vast; `garble()` makes an instance's record as odd
  as real ones get;
- bids: `type: bid` searches price offers at their `min_bid`; a rent with `price` makes an
  interruptible instance (`is_bid`), billed at its bid, and a bid below `min_bid` is refused with
  400 `invalid_price`; `outbid()` stops one as Vast reports an outbid (`actual_status` stopped,
  `intended_status` still running; GPU billing stops, storage goes on) and `win()` starts it
  again (the `on_stop` / `on_start` hooks run, as for a stop and a start);
- the account key and one key per instance (`instance_api_key`, the container's
  `CONTAINER_API_KEY`) that may only start, stop or destroy its own instance;
- a billing ledger per instance: GPU seconds while it should run (not while stopped or offline),
  storage seconds while it exists, bytes recorded with `record_traffic()` or billed at a steady
  rate (`set_traffic_rate()`); `charges()` and
  `GET /api/v0/charges/` show it in the real shape (the instance named only in `source`,
  "instance-<id>");
- fault injection (`inject()`: 429 storms with Vast's plain-text body, 5xx, offers gone,
  dropped connections, starts refused, rent replies without `instance_api_key`; `charges_outage()`:
  the charges unreadable, the rest answering) and hooks
  (`on_rent`, `on_start`, `on_stop`, `on_destroy`) that the local stack uses to start and stop
  host processes.

Every public method and `handle` are thread-safe; hooks run outside the lock. Modules:
`simulator` (the class and its Python controls), `state` (what it holds, the helpers that
change it), `routes` (HTTP routes and auth), `instances`, `billing`, `search`, `wire`, and
`offers` (the seeded offer book, also `python -m tether_local.vast_sim`).
"""

from tether_local.vast_sim.billing import BYTES_PER_GB, Ledger
from tether_local.vast_sim.instances import Hook, InstanceStatus, SimInstance
from tether_local.vast_sim.simulator import FAULT_KINDS, FaultKind, VastSimulator
from tether_local.vast_sim.wire import RATE_LIMIT_TEXT

__all__ = [
    "BYTES_PER_GB",
    "FAULT_KINDS",
    "RATE_LIMIT_TEXT",
    "FaultKind",
    "Hook",
    "InstanceStatus",
    "Ledger",
    "SimInstance",
    "VastSimulator",
]
