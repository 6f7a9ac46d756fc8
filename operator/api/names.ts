// Kubernetes object names, checked as the API server checks them (RFC 1123). The API client
// builds request paths by joining names in, so a name must be checked before it goes into one:
// "..", "/", "?" or "%2F" in a "name" would address some other object of the API.

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * An RFC 1123 DNS label, the form of a namespace's (and a container's) name: lowercase
 * alphanumerics and '-', 1 to 63 characters, starting and ending alphanumeric.
 */
export function isDnsLabel(value: unknown): value is string {
  return typeof value === "string" && DNS_LABEL.test(value);
}

/**
 * An RFC 1123 DNS subdomain, the form of an AgentRun's (and a pod's) name: DNS-label-like parts
 * joined by dots, each starting and ending alphanumeric, at most 253 characters in all.
 */
export function isDnsSubdomain(value: unknown): value is string {
  // The length first: the pattern then never looks at more than 253 characters.
  return typeof value === "string" && value.length <= 253 && DNS_SUBDOMAIN.test(value);
}
