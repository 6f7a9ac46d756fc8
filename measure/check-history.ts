// `npm run check-history -- FILE`: judges a recorded history again, offline, with the same checker
// that gave the soak its verdict (measure/soak/analyse.ts, a pure function of the file). FILE is a
// history.json or the soak directory that holds one. Exit 0 when every invariant held and every
// run settled, 1 when not, 2 when the file cannot be read.
import { checkHistoryCommand } from "./soak/verdict.ts";

try {
  process.exit(checkHistoryCommand(process.argv.slice(2)));
} catch (err) {
  process.stderr.write(`check-history: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(2);
}
