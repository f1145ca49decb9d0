// Creates a blob container on azurite (loopback emulator), signing the request with the
// emulator's well-known development key (Shared Key authorization, as documented for the
// Azure Storage REST API). Usage: node azurite-container.js http://127.0.0.1:PORT NAME
const crypto = require("crypto");
const http = require("http");
const [base, container] = process.argv.slice(2);
const account = "devstoreaccount1";
const key = Buffer.from(
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
  "base64");
const date = new Date().toUTCString();
const version = "2021-08-06";
const toSign = ["PUT", "", "", "", "", "", "", "", "", "", "", "",
  `x-ms-date:${date}\nx-ms-version:${version}`,
  `/${account}/${account}/${container}\nrestype:container`].join("\n");
const signature = crypto.createHmac("sha256", key).update(toSign, "utf8").digest("base64");
const url = new URL(`${base}/${account}/${container}?restype=container`);
const request = http.request(url, {
  method: "PUT",
  headers: { "x-ms-date": date, "x-ms-version": version, "Content-Length": 0,
    Authorization: `SharedKey ${account}:${signature}` },
}, (response) => {
  // 201 created, 409 already exists: both fine.
  if (response.statusCode !== 201 && response.statusCode !== 409) {
    console.error(`creating container ${container}: HTTP ${response.statusCode}`);
    process.exit(1);
  }
});
request.on("error", (e) => { console.error(e.message); process.exit(1); });
request.end();
