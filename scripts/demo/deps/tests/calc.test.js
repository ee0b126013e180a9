// The reference repository's second test: calc.sh prints a number, and
// the right one. Its dependency, is-number, comes from the npm registry
// (package-lock.json pins it with its integrity); `make test` installs it
// outside the repository, through the domain's egress proxy.
'use strict';
const { execFileSync } = require('child_process');
const isNumber = require('is-number');

const cases = [[2, 2, 4], [0, 0, 0], [-3, 1, -2], [40, 2, 42]];
for (const [a, b, want] of cases) {
  const got = execFileSync('sh', ['src/calc.sh', 'add', String(a), String(b)]).toString().trim();
  if (!isNumber(got)) {
    console.log(`FAIL: add ${a} ${b} printed ${JSON.stringify(got)}, not a number`);
    process.exit(1);
  }
  if (Number(got) !== want) {
    console.log(`FAIL: add ${a} ${b} = ${got}, want ${want}`);
    process.exit(1);
  }
}
console.log(`PASS (node, ${cases.length} cases, is-number ${require('is-number/package.json').version})`);
