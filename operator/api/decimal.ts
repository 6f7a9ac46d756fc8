// Money is a decimal string ("12.50"), never a JSON number: a float cannot hold 0.1, and three
// reports of 0.1 must add up to exactly 0.3. The operator does its arithmetic on integers scaled
// by 10^18 (BigInt), which holds every value the patterns admit exactly, and a per-million-tokens
// price (at most 12 fraction digits) times a token count exactly too.

/** An amount: the cost limit, and the cost a sandbox reports. At most 18 digits either side of the point. */
export const DECIMAL_PATTERN = /^[0-9]{1,18}([.][0-9]{1,18})?$/;
/** A price per million tokens: at most 12 fraction digits, so that one token's price is still exact at 10^-18. */
export const PRICE_PATTERN = /^[0-9]{1,15}([.][0-9]{1,12})?$/;

/** Fraction digits of the scaled integers. */
const DIGITS = 18;
export const DECIMAL_SCALE = 10n ** BigInt(DIGITS);

/** The value of a decimal string, scaled by 10^18; undefined for anything that is not a plain decimal. */
export function parseDecimal(text: string): bigint | undefined {
  const match = /^([0-9]+)(?:[.]([0-9]+))?$/.exec(text);
  if (!match) return undefined;
  const fraction = match[2] ?? "";
  if (fraction.length > DIGITS) return undefined;
  return BigInt(match[1] as string) * DECIMAL_SCALE + BigInt(fraction.padEnd(DIGITS, "0") || "0");
}

/** A scaled value as the shortest decimal string: 300000000000000000n -> "0.3", 5n * 10n ** 18n -> "5". */
export function formatDecimal(scaled: bigint): string {
  const sign = scaled < 0n ? "-" : "";
  const abs = scaled < 0n ? -scaled : scaled;
  const whole = abs / DECIMAL_SCALE;
  const fraction = (abs % DECIMAL_SCALE).toString().padStart(DIGITS, "0").replace(/0+$/, "");
  return `${sign}${whole}${fraction ? `.${fraction}` : ""}`;
}

/**
 * A JavaScript number (a fraction from the spec, such as warnAt 0.8) as the decimal it was
 * written as, scaled: 0.8 is 0.8, not the binary fraction nearest to it.
 */
export function decimalOfNumber(value: number): bigint {
  const text = String(value);
  return parseDecimal(/e/i.test(text) ? value.toFixed(DIGITS) : text) ?? 0n;
}
