// containerd's task events as `ctr events` prints them (lines taken from the real node): a
// container's own start and exit count, with containerd's times; an exec's exit, a task's delete
// and anything garbled do not.
import { describe, expect, it } from "vitest";
import { parseTaskEvent } from "../../../measure/soak/node-view.ts";

const ID = "4c542b1b4183d95e58e7f6ff7a6693216ca96a9d44242b3a7f72ecf788b25189";

describe("parseTaskEvent", () => {
  it("reads a container's start at the event's time and its exit at containerd's exited_at", () => {
    expect(parseTaskEvent(`2026-12-06 04:04:20.123456789 +0000 UTC k8s.io /tasks/start {"container_id":"${ID}","pid":8408}`)).toEqual({
      id: ID,
      kind: "start",
      at: Date.parse("2026-12-06T04:04:20.123Z"),
    });
    expect(
      parseTaskEvent(`2026-12-06 04:04:27.79502908 +0000 UTC k8s.io /tasks/exit {"container_id":"${ID}","id":"${ID}","pid":8408,"exit_status":137,"exited_at":"2026-12-06T04:04:27.795002961Z"}`),
    ).toEqual({ id: ID, kind: "exit", at: Date.parse("2026-12-06T04:04:27.795Z") });
  });

  it("ignores an exec's exit, a task's delete, other namespaces and garbled lines", () => {
    expect(parseTaskEvent(`2026-12-06 04:04:27.79 +0000 UTC k8s.io /tasks/exit {"container_id":"${ID}","id":"exec-1","pid":9,"exit_status":0,"exited_at":"2026-12-06T04:04:27.795Z"}`)).toBeUndefined();
    expect(parseTaskEvent(`2026-12-06 04:04:27.81 +0000 UTC k8s.io /tasks/delete {"container_id":"${ID}","pid":8408}`)).toBeUndefined();
    expect(parseTaskEvent(`2026-12-06 04:04:27.81 +0000 UTC moby /tasks/start {"container_id":"${ID}","pid":1}`)).toBeUndefined();
    expect(parseTaskEvent(`2026-12-06 04:04:27.81 +0000 UTC k8s.io /tasks/start {not json`)).toBeUndefined();
    expect(parseTaskEvent("")).toBeUndefined();
  });
});
