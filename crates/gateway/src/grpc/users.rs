//! The Users service: adding users, and who a caller is.

use openshell_proto::v1 as pb;
use openshell_proto::v1::users_server;
use openshell_store::Principal;
use tonic::Request;

use super::{Api, R};

#[tonic::async_trait]
impl users_server::Users for Api {
    async fn create_user(&self, req: Request<pb::CreateUserRequest>) -> R<pb::CreateUserResponse> {
        self.api(req, |p, r| async move {
            let token = self.0.create_user(&p, &r.name, r.admin).await?;
            Ok(pb::CreateUserResponse { name: r.name, token })
        })
        .await
    }

    async fn who_am_i(&self, req: Request<pb::WhoAmIRequest>) -> R<pb::WhoAmIResponse> {
        self.api(req, |p, _| async move {
            Ok(match p {
                Principal::User { name, admin, .. } => {
                    pb::WhoAmIResponse { kind: "user".into(), name, admin, sandbox_id: String::new() }
                }
                Principal::Sandbox { id, name, .. } => {
                    pb::WhoAmIResponse { kind: "sandbox".into(), name, admin: false, sandbox_id: id.to_string() }
                }
            })
        })
        .await
    }
}
