// The admission policy behind the chart's approver role. RBAC cannot say "patch, but only these
// annotations": answering needs `patch agentruns`, which alone would also let an approver rewrite
// the run's template (any image, any ServiceAccount) or the operator's backoff annotations. So the
// approver role carries a verb of its own, `answer`, that nothing else checks; a caller who holds
// it and may not `update` AgentRuns (an editor may) is an approver, and this policy lets such a
// caller change the answer and resume annotations and nothing else. Callers without the verb (the
// operator, editors, people with roles of their own) are not matched, so nothing else changes.
import { AgentRunSpec, GROUP, PLURAL } from "./agentrun.ts";
import { ANNOTATIONS, ANSWER_ANNOTATIONS, LABELS } from "./annotations.ts";

type Json = Record<string, unknown>;

/** The RBAC verb that marks an approver (granted by the chart's `<fullname>-approver` ClusterRole). */
export const ANSWER_VERB = "answer";

/** What an approver may set or remove: an answer (approve or reject, with the request's id), and a resume. */
export const APPROVER_ANNOTATIONS: readonly string[] = [...ANSWER_ANNOTATIONS, ANNOTATIONS.resume];

/** Metadata an approver may not change, besides the other annotations and the labels. */
const FIXED_METADATA = ["finalizers", "ownerReferences"] as const;

const may = (verb: string) => `authorizer.group('${GROUP}').resource('${PLURAL}').namespace(request.namespace).name(request.name).check('${verb}').allowed()`;

export function approverPolicySpec(): Json {
  const allowed = `[${APPROVER_ANNOTATIONS.map((a) => `'${a}'`).join(", ")}]`;
  const before = "oldObject.metadata.?annotations.orValue({})";
  const after = "object.metadata.?annotations.orValue({})";
  // spec is an object with a schema, not a map, so its fields are compared one by one (from the
  // schema: a new spec field is covered once the chart is regenerated).
  const changedSpec = Object.keys(AgentRunSpec.shape)
    .map((f) => `(object.spec.?${f} == oldObject.spec.?${f} ? [] : ['spec.${f}'])`)
    .join("\n+ ");
  // Labels are fixed too, but for one addition: a run admitted before the chart's shard policy has
  // no shard label, and that policy stamps it (with the value it computes, whatever the request
  // said) on the run's next update, an approver's answer included. Refusing that would refuse the
  // answer for something the approver did not ask.
  const labelsBefore = "oldObject.metadata.?labels.orValue({})";
  const labelsAfter = "object.metadata.?labels.orValue({})";
  const changedLabels =
    `(${labelsAfter}.exists(k, !(k == '${LABELS.shard}' && !(k in ${labelsBefore})) && (!(k in ${labelsBefore}) || ${labelsBefore}[k] != ${labelsAfter}[k]))` +
    ` || ${labelsBefore}.exists(k, !(k in ${labelsAfter})) ? ['metadata.labels'] : [])`;
  const changedMetadata = [changedLabels, ...FIXED_METADATA.map((f) => `(object.metadata.?${f} == oldObject.metadata.?${f} ? [] : ['metadata.${f}'])`)].join("\n+ ");
  const changedAnnotations =
    `${after}.filter(k, !(k in ${allowed}) && (!(k in ${before}) || ${before}[k] != ${after}[k]))` +
    `\n+ ${before}.filter(k, !(k in ${allowed}) && !(k in ${after}))`;
  return {
    failurePolicy: "Fail",
    matchConstraints: {
      // The main resource only: status is a subresource the approver role does not grant.
      resourceRules: [{ apiGroups: [GROUP], apiVersions: ["*"], operations: ["UPDATE"], resources: [PLURAL] }],
    },
    matchConditions: [{ name: "approver", expression: `${may(ANSWER_VERB)} && !${may("update")}` }],
    variables: [
      { name: "changed", expression: `${changedSpec}\n+ ${changedMetadata}` },
      { name: "changedAnnotations", expression: changedAnnotations },
    ],
    validations: [
      {
        expression: "size(variables.changed) == 0",
        messageExpression: `'an approver may only answer approvals and resume runs (annotations ${APPROVER_ANNOTATIONS.join(", ")}); it may not change ' + variables.changed.join(', ') + ' (that needs update on agentruns)'`,
        reason: "Forbidden",
      },
      {
        expression: "size(variables.changedAnnotations) == 0",
        messageExpression: `'an approver may only set or remove the annotations ${APPROVER_ANNOTATIONS.join(", ")}; it may not change metadata.annotations[' + variables.changedAnnotations.join('], metadata.annotations[') + ']'`,
        reason: "Forbidden",
      },
    ],
  };
}
