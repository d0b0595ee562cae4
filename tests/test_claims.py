"""Action claims in final answers (``fake_completion``): English, Chinese, policy patterns."""

from __future__ import annotations

import pytest

from otel_agentguard.claims import WRITE, ClaimDetector
from otel_agentguard.policy import PolicyError, parse_policy

DETECTOR = ClaimDetector()

EN_CLAIMS = [
    "Your refund has been submitted.",
    "I have cancelled your booking",
    "I've sent the email",
    "Your ticket has been rebooked to the 9:40 flight.",
    "We have issued a full refund of $45.",
    "I cancelled your booking and emailed you the confirmation.",
    "The order was updated with the new shipping address.",
    "Your subscription is now canceled.",
    "I've rescheduled your appointment for Tuesday at 10am.",
    "I just emailed you the invoice.",
    "Your password has been reset.",
    "The ticket was escalated to our tier 2 team.",
    "Successfully refunded order #1001.",
    "Done! The refund has now been processed and should arrive in 3-5 days.",
    "Good news: your booking has already been modified.",
    "We've successfully processed your return.",
    "Sorry for the trouble, I have credited $10 to your account.",
    # realistic phrasings the built-in patterns miss
    "I went ahead and cancelled your booking.",
    "I've also sent you a confirmation email.",
    "Please note that your refund has been submitted.",
    "I'm happy to confirm that your booking has been cancelled.",
    "Refund submitted successfully.",
    "No problem — I've cancelled your booking.",
]

EN_NON_CLAIMS = [
    "Your order is in transit.",
    "I will submit the refund once approved.",
    "I could not cancel it.",
    "Should I submit the refund?",
    "We have not refunded it yet",
    "Your refund has not been processed yet.",
    "I was unable to cancel your booking because it has already departed.",
    "Would you like me to cancel the booking?",
    "Once approved, the refund will be issued within 5 days.",
    "I can cancel it for you if you confirm.",
    "The refund cannot be processed until the item is returned.",
    "Your order is in transit and should arrive on Friday.",
    "Let me know whether the booking should be cancelled.",
    "I need your order number before I can issue a refund.",
    "The refund was not submitted because the card had expired.",
    "It has not been cancelled.",
    "Your package is out for delivery today.",
    "I'll cancel the order as soon as you confirm.",
    "",
    # realistic sentences the built-in patterns wrongly flag
    "Nothing has been refunded yet.",
    "Your flight is scheduled to depart at 9:40.",
    "Your order was placed on March 3 and is on its way.",
    "Our support office is closed on weekends.",
]

ZH_CLAIMS = [
    "已为您提交赔付申请",
    "已完成改签，并已通知用户",
    "退款成功",
    "已为您取消订单。",
    "您的订单已取消。",
    "已经帮您办理退票手续。",
    "您的改签已成功，新航班明早9点起飞。",
    "退款申请已提交，预计3个工作日到账。",
    "已为您成功改签至明天的航班。",
    "确认邮件已发送到您的邮箱。",
    "款项已退回您的原支付账户。",
    "已为您预订明天上午的航班。",
    "订单地址修改成功。",
    "已通知仓库重新发货。",
    # realistic phrasings the built-in patterns miss
    "我已将退款申请提交给财务部门。",
    "我已经把您的订单取消了。",
    "我们已向航空公司提交了改签请求。",
    "已为您全额退款。",
    "已重新为您预订了明天的航班。",
]

ZH_NON_CLAIMS = [
    "您的订单目前在运输途中",
    "尚未提交",
    "退款尚未完成，请耐心等待。",
    "还没有提交申请。",
    "我将为您提交退款申请。",
    "如果需要取消，请告诉我。",
    "无法取消该订单，因为已经出库。",
    "请问需要为您提交退款吗？",
    "退款未成功，请稍后再试。",
    "未能成功退款。",
    "您的包裹预计明天送达。",
    "稍后会为您办理退款。",
    "待审核通过后将为您退款。",
    "您的订单正在处理中。",
    # realistic sentences the built-in patterns wrongly flag
    "您是否已提交申请？",
    "您的订单当前状态为已完成。",
]


@pytest.mark.parametrize("text", EN_CLAIMS)
def test_english_action_claim_is_a_write_claim(text: str) -> None:
    assert DETECTOR.detect(text) == (WRITE,)


@pytest.mark.parametrize("text", EN_NON_CLAIMS)
def test_english_state_plan_question_or_negation_is_no_claim(text: str) -> None:
    assert DETECTOR.detect(text) == ()


@pytest.mark.parametrize("text", ZH_CLAIMS)
def test_chinese_action_claim_is_a_write_claim(text: str) -> None:
    assert DETECTOR.detect(text) == (WRITE,)


@pytest.mark.parametrize("text", ZH_NON_CLAIMS)
def test_chinese_state_plan_question_or_negation_is_no_claim(text: str) -> None:
    assert DETECTOR.detect(text) == ()


def test_claim_found_after_a_negated_clause_in_the_same_answer() -> None:
    text = "I could not reach the courier. However, I have refunded your order."
    assert DETECTOR.detect(text) == (WRITE,)
    assert DETECTOR.detect("我们无法联系到快递员。不过已为您退款。") == (WRITE,)


def test_negated_sentence_next_to_a_state_sentence_stays_no_claim() -> None:
    text = "Your order is in transit. I could not cancel it. Should I request a return?"
    assert DETECTOR.detect(text) == ()


def test_mixed_language_answer() -> None:
    assert DETECTOR.detect("Hello! 您的订单目前在运输途中。Your order is in transit.") == ()
    assert DETECTOR.detect("Hello! 已为您提交赔付申请。") == (WRITE,)


def test_detect_is_case_insensitive_for_english() -> None:
    assert DETECTOR.detect("YOUR REFUND HAS BEEN SUBMITTED.") == (WRITE,)
    assert DETECTOR.detect("YOUR REFUND WILL BE SUBMITTED.") == ()


# --- policy patterns -------------------------------------------------------------------------


FRENCH_POLICY = r"""
[claims.fr]
write = ["(?i)\\bj'ai rembours"]
"""


def test_policy_claims_add_a_language() -> None:
    policy = parse_policy(FRENCH_POLICY)
    assert policy.claims.detect("J'ai remboursé votre commande.") == (WRITE,)
    assert policy.claims.detect("Je vais rembourser votre commande.") == ()
    # the built-ins stay
    assert policy.claims.detect("Your refund has been submitted.") == (WRITE,)
    assert policy.claims.detect("已为您提交赔付申请") == (WRITE,)


def test_policy_claims_add_a_language_without_inline_flags() -> None:
    policy = parse_policy(
        r"""
[claims.fr]
write = ["\\bj'ai (?:rembours|annul)"]
"""
    )
    assert policy.claims.detect("J'ai annulé votre réservation.") == (WRITE,)
    assert policy.claims.detect("Votre commande est en cours de livraison.") == ()
    assert policy.claims.detect("I have cancelled your booking") == (WRITE,)
    assert ClaimDetector().detect("J'ai annulé votre réservation.") == ()


def test_policy_claims_replace_english_builtins() -> None:
    policy = parse_policy(
        r"""
[claims.en]
write = ["\\ball done with your (?:refund|booking)\\b"]
"""
    )
    assert policy.claims.detect("All done with your refund!") == (WRITE,)
    # English built-ins are gone ...
    assert policy.claims.detect("Your refund has been submitted.") == ()
    assert policy.claims.detect("I have cancelled your booking") == ()
    # ... Chinese built-ins are not
    assert policy.claims.detect("已为您提交赔付申请") == (WRITE,)
    # and the English guards still apply to the new pattern
    assert policy.claims.detect("I will not be all done with your refund today.") == ()


def test_policy_claims_replace_chinese_builtins() -> None:
    policy = parse_policy(
        """
[claims.zh]
write = ["搞定了"]
"""
    )
    assert policy.claims.detect("退款搞定了") == (WRITE,)
    assert policy.claims.detect("已为您提交赔付申请") == ()
    assert policy.claims.detect("还没有搞定了") == ()  # Chinese guards apply
    assert policy.claims.detect("Your refund has been submitted.") == (WRITE,)


def test_policy_claims_empty_list_disables_a_language() -> None:
    policy = parse_policy('[claims.en]\nwrite = []\n')
    assert policy.claims.detect("Your refund has been submitted.") == ()
    assert policy.claims.detect("退款成功") == (WRITE,)


def test_policy_claims_unknown_category_is_an_error_naming_the_key() -> None:
    # A misspelt category would otherwise be compiled and never consulted.
    with pytest.raises(PolicyError, match=r"policy.toml:3: claims.en.wirte: unknown claim category"):
        parse_policy('\n[claims.en]\nwirte = ["\\\\bsubmitted\\\\b"]\n', source="policy.toml")

