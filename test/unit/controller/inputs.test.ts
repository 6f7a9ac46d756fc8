// The decision's input builder: the nodes asked for are those the run's pods are bound to, or all
// of them when a pod went unseen with no node on record; this operator's own sightings move onto
// the API server's clock.
import { describe, expect, it } from "vitest";
import { decisionInputs, type NodeSource, type Sightings } from "../../../operator/controller/inputs.ts";

type Json = Record<string, any>;

function nodeSource(): NodeSource & { asked: string[][]; all_: number } {
  const source = {
    asked: [] as string[][],
    all_: 0,
    all: () => {
      source.all_++;
      return new Map();
    },
    views: (names: Iterable<string>) => {
      source.asked.push([...names].sort());
      return new Map();
    },
  };
  return source;
}
const sightings = (extra: Partial<Sightings> = {}): Sightings => ({ deletedPods: [], detachedPods: [], containersSeenRunning: () => undefined, ...extra });
const pod = (uid: string, nodeName?: string): Json => ({ metadata: { uid }, spec: nodeName ? { nodeName } : {} });

describe("decisionInputs", () => {
  it("asks for the nodes of the run's pods, its deleted pods and its status", () => {
    const nodes = nodeSource();
    const run = { status: { podUID: "u1", nodeName: "n3", terminating: [{ uid: "u0", nodeName: "n4" }] } };
    decisionInputs(run, [pod("u1", "n1")], sightings({ deletedPods: [pod("u0", "n2")] }), nodes, (ms) => ms);
    expect(nodes.asked).toEqual([["n1", "n2", "n3", "n4"]]);
    expect(nodes.all_).toBe(0);
  });

  it("asks for every node when a pod the status tracks went unseen with no node on record", () => {
    const nodes = nodeSource();
    decisionInputs({ status: { podUID: "gone" } }, [], sightings(), nodes, (ms) => ms);
    expect(nodes.all_).toBe(1);
    const terminating = nodeSource();
    decisionInputs({ status: { terminating: [{ uid: "gone" }] } }, [], sightings(), terminating, (ms) => ms);
    expect(terminating.all_).toBe(1);
  });

  it("moves its own sightings onto the server's clock and passes the rest through", () => {
    const upper = (ms: number) => ms + 250;
    const refusedWrite = { message: "too large", tooLarge: true };
    const inputs = decisionInputs(
      { status: {} },
      [pod("u1", "n1")],
      sightings({ heartbeatSeenAt: 1_000, containersSeenRunning: (uid) => (uid === "u1" ? new Map([["agent", 2_000]]) : undefined), detachedPods: [pod("u7")], refusedWrite }),
      nodeSource(),
      upper,
    );
    expect(inputs.heartbeatSeenAt).toBe(1_250);
    expect(inputs.containerStartsSeen?.get("u1")?.get("agent")).toBe(2_250);
    expect(inputs.detachedPods).toHaveLength(1);
    expect(inputs.refusedWrite).toBe(refusedWrite);
  });

  it("leaves out what it does not know", () => {
    const inputs = decisionInputs({ status: {} }, [], sightings(), { all: () => undefined, views: () => undefined }, (ms) => ms);
    expect(inputs).toEqual({ deletedPods: [] });
  });
});
