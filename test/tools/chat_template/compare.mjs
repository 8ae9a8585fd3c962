// Compares the oracle's renderings (render.mjs) with exaserve-cli chat-template's, line by line:
// `node compare.mjs NAME CONVERSATIONS EXPECTED ACTUAL`. A line matches when both rendered the
// same string byte for byte, or both raised (the messages differ between engines). Prints the
// counts and the first mismatches; exits 1 on any mismatch.
import { readFileSync } from "node:fs";

const [name, conversationsFile, expectedFile, actualFile] = process.argv.slice(2);
const lines = (file) => readFileSync(file, "utf8").split("\n").filter((l) => l !== "");
const conversations = lines(conversationsFile);
const expected = lines(expectedFile);
const actual = lines(actualFile);
if (expected.length !== conversations.length || actual.length !== conversations.length) {
  console.log(`${name}: ${conversations.length} conversations, ${expected.length} oracle lines, ` +
              `${actual.length} exaserve lines`);
  process.exit(1);
}
const isError = (v) => typeof v === "object" && v !== null && "error" in v;
let mismatches = 0, raised = 0;
for (let i = 0; i < conversations.length; ++i) {
  const want = JSON.parse(expected[i]);
  const got = JSON.parse(actual[i]);
  if (isError(want) && isError(got)) {
    ++raised;
    continue;
  }
  if (want === got) continue;
  if (++mismatches <= 3) {
    console.log(`${name}: conversation ${i + 1} differs\n  input:    ${conversations[i]}\n` +
                `  oracle:   ${expected[i]}\n  exaserve: ${actual[i]}`);
  }
}
console.log(`${name}: ${conversations.length} conversations compared, ` +
            `${conversations.length - raised - mismatches} byte-identical renderings, ` +
            `${raised} raised in both, ${mismatches} mismatches`);
process.exit(mismatches === 0 ? 0 : 1);
