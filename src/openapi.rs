//! The OpenAPI 3.1 document, generated from the handlers' annotations, and
//! Swagger UI (its assets compiled in: no network needed) at `/docs`.

use axum::Router;
use utoipa::{
    Modify, OpenApi,
    openapi::security::{ApiKey, ApiKeyValue, SecurityScheme},
};
use utoipa_swagger_ui::SwaggerUi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "hmdp-rs",
        description = "A voucher flash-sale (seckill) backend in the style of Heima-Dianping. Every answer is the \
                       envelope `{success, data, total, errorMsg, errorCode}`; failures carry an errorCode. Behind \
                       nginx the same routes are served under `/api/`, where business failures answer HTTP 200 with \
                       `success:false` (401 stays 401)."
    ),
    paths(
        crate::http::health::health,
        crate::http::health::ready,
        crate::auth::send_code,
        crate::auth::login,
        crate::auth::me,
        crate::auth::logout,
        crate::voucher::create_voucher,
        crate::voucher::create_seckill_voucher,
        crate::voucher::list_for_shop,
        crate::voucher::set_status,
        crate::voucher::set_stock,
        crate::voucher::redeem_order,
        crate::seckill::routes::pay_order,
        crate::seckill::routes::cancel_order,
        crate::seckill::routes::refund_order,
        crate::salepath::ordering::place_order,
        crate::salepath::routes::ask_for_path,
        crate::salepath::ordering::place_order_on_path,
        crate::seckill::routes::my_orders,
        crate::seckill::routes::show_order,
        crate::monitoring::scrape,
    ),
    components(schemas(crate::errors::ErrorCode)),
    modifiers(&Security),
    tags(
        (name = "user", description = "SMS-code login and sessions"),
        (name = "voucher", description = "Vouchers and seckill vouchers"),
        (name = "order", description = "Seckill orders"),
        (name = "operations", description = "Health, readiness, metrics"),
    )
)]
pub(crate) struct ApiDoc;

/// Names of the security schemes the handlers refer to.
pub(crate) const USER_TOKEN: &str = "token";
pub(crate) const ADMIN_KEY: &str = "adminKey";

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            USER_TOKEN,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "authorization",
                "the token from /user/login, bare or as `Bearer <token>`",
            ))),
        );
        components.add_security_scheme(
            ADMIN_KEY,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "x-admin-key",
                "the configured ADMIN_KEY",
            ))),
        );
    }
}

/// `/openapi.json` and Swagger UI under `/docs`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    SwaggerUi::new("/docs").url("/openapi.json", ApiDoc::openapi()).into()
}
