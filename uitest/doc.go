// Package uitest drives dlock ui's page in a real browser (Debian's
// chromium, through chromedp). It is a module of its own so that only it
// pays for chromedp: the dlock module's go.mod does not list it.
package uitest
