"""A travel-then-code agent session: a reservation id told at turn 3, asked about late.

Shared by the recall and tenant-isolation tests.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.messages import assistant, call, tool, user

NEEDLE_ID = "ZFA04Y"
ASK = "Which reservation was the Denver trip again? I need its reservation id."



def file_listing(i: int) -> str:
    """A plausible 300-token tool output that has nothing to do with travel."""
    return "\n".join(f"src/module_{i}/part_{j}.py: def handler_{i}_{j}(request): "
                     f"return render(template_{j}, status={200 + j})" for j in range(14))


def session(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."},
                                  user("Help me sort out my trips and then my code.")]
    for t in range(1, turns + 1):
        cid = f"call_{t}"
        if t == 3:
            out = json.dumps([{"reservation_id": NEEDLE_ID, "destination": "Denver (DEN)",
                               "origin": "Boston (BOS)", "date": "2026-12-04",
                               "passengers": 2, "cabin": "economy"},
                              {"reservation_id": "K8P2QL", "destination": "Miami (MIA)",
                               "origin": "Boston (BOS)", "date": "2027-01-15",
                               "passengers": 1, "cabin": "business"}], indent=2)
            msgs += [assistant(None, call(cid, "list_reservations", "{}")), tool(cid, out),
                     assistant("You have two trips: Denver and Miami."), user("Thanks. "
                                                                              "Now the code.")]
        else:
            msgs += [assistant(None, call(cid, "list_files", f'{{"dir": "src/module_{t}"}}')),
                     tool(cid, file_listing(t)), assistant(f"Module {t} looks fine."),
                     user(f"Check module {t + 1}.")]
    return msgs
