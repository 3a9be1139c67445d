// The admin JSON API as the console calls it: same origin, so the browser sends the login it
// gave for /console with every request.

export class ApiError extends Error {}

export async function api(path, options = {}) {
  const init = { ...options, headers: { "Content-Type": "application/json" } };
  if (options.body !== undefined) init.body = JSON.stringify(options.body);
  const response = await fetch(path, init);
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(body && body.message ? `${body.error}: ${body.message}` : `HTTP ${response.status}`);
  }
  return body;
}

// A change behind a confirmation: resolves true only when the user pressed Confirm.
export function confirmed(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}
