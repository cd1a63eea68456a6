"""The console of a standalone with authentication and authorization, in a real headless browser: it asks
for credentials, makes its admin and console calls with them, and asks again when they are refused."""

from __future__ import annotations

import base64
import hashlib

from playwright.sync_api import expect

from nereus.auth.tokens import create_token
from tests.console import test_browser
from tests.standalone_fixtures import token_auth_standalone

PASSWORD = "pässword:1"  # non-ASCII and a colon: the browser must encode it as UTF-8

browser, page = test_browser.browser, test_browser.page  # the same headless Chromium set-up


secured = token_auth_standalone(
    "secured", "console-auth",
    htpasswd=f"admin:{{SHA}}{base64.b64encode(hashlib.sha1(PASSWORD.encode()).digest()).decode()}\n")


def _sign_in(page, token: str) -> None:
    page.locator("#sign-in-token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def test_the_console_signs_in_with_a_token_and_sends_it(secured, page):
    page.goto(secured.http + "/console")
    form = page.locator("#sign-in")
    expect(form).to_be_visible()
    expect(form).to_contain_text("Authentication required")

    _sign_in(page, create_token("nobody", secret_key=secured.secret))  # valid, but no superuser
    expect(page.locator("#sign-in")).to_contain_text("super-user")

    _sign_in(page, create_token("admin", secret_key=secured.secret))
    expect(page.locator("#brokers-table")).to_contain_text("(this broker)")
    expect(page.locator("#sign-out")).to_be_visible()
    page.errors.clear()  # the refused calls above were logged by the browser as failed loads
    page.goto(secured.http + "/console#/groups")
    expect(page.locator("#groups")).to_contain_text("no consumer groups")
    page.reload()  # kept for the tab
    expect(page.locator("#groups")).to_contain_text("no consumer groups")
    assert page.errors == []

    page.locator("#sign-out").click()
    expect(page.locator("#sign-in")).to_be_visible()


def test_the_console_signs_in_with_user_and_password(secured, page):
    page.goto(secured.http + "/console")
    page.locator("#sign-in-method").select_option("basic")
    page.locator("#sign-in-user").fill("admin")
    page.locator("#sign-in-password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#brokers-table")).to_contain_text("(this broker)")
