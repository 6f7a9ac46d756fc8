// Which shard a run belongs to: a hash of its namespace and name, the same in the operator and in
// the MutatingAdmissionPolicy that stamps the label at admission, where it is written in CEL. CEL
// has no hash function, so this is one that CEL can compute with what the API server offers
// (`lists.range`, `charAt`, `indexOf`, `sum`): each character's place in an alphabet, weighted by a
// multiplicative hash of its position, summed, modulo the shard count. Every value stays far
// below 2^53, so JavaScript's numbers and CEL's 64-bit integers agree.

/** The characters of a namespace and a run's name (DNS labels and subdomains), and the '/' between them. */
export const SHARD_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-./";
const MULTIPLIER = 2654435761;
const OFFSET = 40503;
const PRIME = 1048573;

/** The run's shard among `shards` (0-based). */
export function shardOf(namespace: string, name: string, shards: number): number {
  const key = `${namespace}/${name}`;
  let sum = 0;
  for (let i = 0; i < key.length; i++) sum += ((i * MULTIPLIER + OFFSET) % PRIME) * (SHARD_ALPHABET.indexOf(key.charAt(i)) + 1);
  return sum % shards;
}

/**
 * The same function in CEL, over the admission request's namespace and the object's name (the
 * policy stamps only objects that have a name: one made with generateName gets its label from the
 * operator).
 */
export function shardExpression(shards: number): string {
  const key = "request.namespace + '/' + object.metadata.name";
  return `string(lists.range(size(${key})).map(i, ((i * ${MULTIPLIER} + ${OFFSET}) % ${PRIME}) * ('${SHARD_ALPHABET}'.indexOf((${key}).charAt(i)) + 1)).sum() % ${shards})`;
}
