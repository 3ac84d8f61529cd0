//! `Relu`: after a layer's product or bias it is that layer's activation; a second `Relu`
//! changes nothing. Every other activation is refused (see `refusals`).

use super::builder::{Act, Builder, Stage, Value};
use super::network::Activation;
use crate::error::LipfpError;
use crate::onnx::reader::proto;

impl Builder<'_> {
    /// `Relu` of the newest activation.
    pub(super) fn relu(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Relu";
        let a = self.act(inputs[0], label, op)?;
        self.require_head(&a, label, op)?;
        match a.stage {
            Stage::Input => {
                return Err(self.fail(label, op, "ReLU on the network input is not supported"))
            }
            Stage::Product | Stage::Biased => {
                let last = self
                    .layers
                    .last_mut()
                    .expect("a stage after Input has a layer");
                last.act = Activation::Relu;
                last.nodes.push(label.to_string());
                last.ops.push(op.to_string());
            }
            Stage::Activated => {}
        }
        self.chain_id += 1;
        self.set(
            node,
            Value::Act(Act {
                stage: Stage::Activated,
                id: self.chain_id,
                ..a
            }),
        );
        Ok(())
    }
}
